"""CPU burst for LS pods (koordlet qosmanager/plugins/cpuburst).

Static: cfs_burst_us (v2 cpu.max.burst) = limit cores x cpuBurstPercent% x 100000 per
container, the pod the sum. Dynamic (cfsQuotaBurstOnly / auto): a throttled container's
cfs quota grows x1.2 up to cfsQuotaBurstPercent% of its base while the node's share pool is
under sharePoolThresholdPercent, holds while cooling (5 points below it) and shrinks x0.8
back toward the base when the pool is overloaded.
"""

from __future__ import annotations

import json

from koordcommon.model import QoSClass
from koordcommon.schemas import CPUBurstStrategy, NodeSLOSpec

from ..model import CFS_PERIOD_US, CgroupWrite, PodState, QoSState
from .cpuset import parse_cpuset

NAME = "cpu_burst"
ANNOTATION = "koordinator.sh/cpuBurst"
SCALE_UP = 1.2
SCALE_DOWN = 0.8
COOLING_BAND = 5


def eligible(p: PodState) -> bool:
    return p.raw_qos not in (QoSClass.LSR, QoSClass.LSE, QoSClass.BE) and p.info.phase in ("Pending", "Running")


def pod_config(p: PodState, node: CPUBurstStrategy) -> CPUBurstStrategy:
    raw = p.info.annotation(ANNOTATION)
    if not raw:
        return node
    try:
        override = json.loads(raw)
        return node.model_copy(update={k: v for k, v in override.items() if k in CPUBurstStrategy.model_fields})
    except (ValueError, AttributeError, TypeError):
        return node


def burst_us(limit_milli: int, percent: int) -> int:
    return int((limit_milli / 1000) * (percent / 100) * CFS_PERIOD_US)


def share_pool_state(state: QoSState, threshold: int) -> str:
    """overload | cooling | idle, from the usage of the CPUs not bound to LSE/LSR pods."""
    bound_cpus = 0
    bound_usage = 0
    for p in state.pods:
        if p.info.cpuset and p.raw_qos in (QoSClass.LSE, QoSClass.LSR):
            bound_cpus += len(parse_cpuset(p.info.cpuset))
            bound_usage += p.usage.cpu_milli if p.usage else 0
    pool = state.capacity.cpu_milli - bound_cpus * 1000
    if pool <= 0 or state.node_usage is None:
        return "cooling"
    pct = (state.node_usage.cpu_milli - bound_usage) * 100 / pool
    if pct >= threshold:
        return "overload"
    if pct >= threshold - COOLING_BAND:
        return "cooling"
    return "idle"


def plan(state: QoSState, slo: NodeSLOSpec) -> list[CgroupWrite]:
    node_cfg = slo.cpuBurstStrategy
    writes: list[CgroupWrite] = []
    pool = share_pool_state(state, node_cfg.sharePoolThresholdPercent)
    for p in state.pods:
        if not eligible(p):
            continue
        cfg = pod_config(p, node_cfg)
        if cfg.policy == "none" and node_cfg.policy == "none":
            continue  # never enabled here: leave the files as the kubelet made them
        static = cfg.policy in ("cpuBurstOnly", "auto")
        dynamic = cfg.policy in ("cfsQuotaBurstOnly", "auto")
        pod_burst = 0
        pod_quota = 0
        all_limited = bool(p.info.containers)
        for c in p.info.containers:
            rel = p.containers.get(c.name)
            limit = c.limits.cpu_milli
            b = burst_us(limit, cfg.cpuBurstPercent) if static and limit > 0 else 0
            pod_burst += b
            if rel is not None:
                writes.append(CgroupWrite(rel, "cpu.cfs_burst_us", b, NAME, "container"))
            if limit <= 0:
                all_limited = False
                continue
            base = limit * CFS_PERIOD_US // 1000
            quota = base
            if dynamic and rel is not None:
                cur_text = state.read(rel, "cpu.cfs_quota_us")
                cur = int(cur_text) if cur_text not in (None, "") else base
                if cur > 0:
                    ceil = base * max(cfg.cfsQuotaBurstPercent, 100) // 100
                    throttled = p.throttled_ratio is None or p.throttled_ratio > 0
                    if pool == "idle" and throttled:
                        quota = min(int(cur * SCALE_UP), ceil)
                    elif pool == "overload":
                        quota = max(int(cur * SCALE_DOWN), base)
                    else:
                        quota = min(max(cur, base), ceil)
                    writes.append(CgroupWrite(rel, "cpu.cfs_quota_us", quota, NAME, "container"))
            pod_quota += quota
        writes.append(CgroupWrite(p.rel, "cpu.cfs_burst_us", pod_burst, NAME, "pod"))
        if dynamic and all_limited:
            # the pod dir must never be tighter than its containers: raise it first, lower it last
            w = CgroupWrite(p.rel, "cpu.cfs_quota_us", pod_quota, NAME, "pod")
            if _raising(state, p.rel, pod_quota):
                writes.insert(0, w)
            else:
                writes.append(w)
    return writes


def _raising(state: QoSState, rel: str, value: int) -> bool:
    cur = state.read(rel, "cpu.cfs_quota_us")
    try:
        return cur is not None and int(cur) != -1 and value > int(cur)
    except ValueError:
        return False
