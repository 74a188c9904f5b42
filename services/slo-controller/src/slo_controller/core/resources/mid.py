"""MidResource: `mid-cpu` / `mid-memory`, prod capacity reclaimable for mid-tier pods.

Dynamic (default):
    mid = min(max(min(prodReclaimable, capacity - nodeUsage), 0) + unallocated x midUnallocatedPercent,
              capacity x midThresholdPercent)
    unallocated = max(capacity - max(nodeReserved, systemUsed) - prodAllocated, 0)
Static (`midReclaimMode: static`): min(capacity x midStaticReservedPercent, capacity x midThresholdPercent).
"""

from __future__ import annotations

from koordcommon import resources as rn

from ..config import MID_RECLAIM_STATIC, ColocationStrategy
from ..snapshot import NodeSnapshot
from . import ResourceItems, computed_items, giga, ratio, reset_items, trunc_percent

NAME = "mid"
SUFFIXES = (rn.MID_CPU_SUFFIX, rn.MID_MEMORY_SUFFIX)
DEGRADE_MESSAGE = "degrade node Mid resource because of abnormal nodeMetric, reason: degradedByMidResource"


def calculate(snapshot: NodeSnapshot, strategy: ColocationStrategy) -> ResourceItems:
    cap_c, cap_m = snapshot.capacity()
    thr_c_pct, thr_m_pct = strategy.midCPUThresholdPercent, strategy.midMemoryThresholdPercent
    thr_c, thr_m = trunc_percent(cap_c, thr_c_pct), trunc_percent(cap_m, thr_m_pct)
    if strategy.midReclaimMode == MID_RECLAIM_STATIC:
        return _static(cap_c, cap_m, thr_c, thr_m, strategy)
    if snapshot.metric_stale(strategy.degrade_after_ms):
        return reset_items(NAME, SUFFIXES, DEGRADE_MESSAGE, True, "degradedByMidResource")
    metric = snapshot.metric
    # A missing prodReclaimable does not degrade: it reclaims nothing (Koordinator).
    rec_c, rec_m = metric.prod_reclaimable or (0, 0)
    sys_c = metric.system_usage[0] + metric.host_prod_usage[0]
    sys_m = metric.system_usage[1] + metric.host_prod_usage[1]
    kr_c, kr_m = snapshot.node_reserved()
    nr_c, nr_m = max(kr_c, sys_c), max(kr_m, sys_m)
    pa_c, pa_m = snapshot.totals().prod_request
    un_c, un_m = max(cap_c - nr_c - pa_c, 0), max(cap_m - nr_m - pa_m, 0)
    if metric.node_usage is None:
        free_c = free_m = 0
    else:
        free_c, free_m = cap_c - metric.node_usage[0], cap_m - metric.node_usage[1]
    pct = strategy.midUnallocatedPercent
    cpu = min(max(min(rec_c, free_c), 0) + trunc_percent(un_c, pct), thr_c)
    mem = min(max(min(rec_m, free_m), 0) + trunc_percent(un_m, pct), thr_m)

    def cpu_message() -> str:
        return (
            f"midAllocatable[CPU(milli-core)]:{cpu} = min(min(ProdReclaimable:{rec_c}, NodeUnused:{free_c}) + "
            f"Unallocated:{un_c} * midUnallocatedRatio:{ratio(pct)}, "
            f"NodeCapacity:{cap_c} * thresholdRatio:{ratio(thr_c_pct)})"
        )

    def memory_message() -> str:
        return (
            f"midAllocatable[Memory(GB)]:{giga(mem)} = min(min(ProdReclaimable:{giga(rec_m)}, "
            f"NodeUnused:{giga(free_m)}) + Unallocated:{giga(un_m)} * midUnallocatedRatio:{ratio(pct)}, "
            f"NodeCapacity:{giga(cap_m)} * thresholdRatio:{ratio(thr_m_pct)})"
        )

    def inputs() -> dict:
        return {
            "prodReclaimable": [rec_c, rec_m],
            "nodeUnused": [free_c, free_m],
            "unallocated": [un_c, un_m],
            "prodAllocated": [pa_c, pa_m],
        }

    return computed_items(NAME, SUFFIXES, ((cpu, cpu_message), (mem, memory_message)), inputs)


def _static(cap_c: int, cap_m: int, thr_c: int, thr_m: int, strategy: ColocationStrategy) -> ResourceItems:
    # Static reservations do not read metrics, so a stale NodeMetric does not degrade them.
    st_c_pct, st_m_pct = strategy.midStaticCPUReservedPercent, strategy.midStaticMemoryReservedPercent
    cpu = min(trunc_percent(cap_c, st_c_pct), thr_c)
    mem = min(trunc_percent(cap_m, st_m_pct), thr_m)
    cpu_msg = (f"midAllocatable[CPU(milli-core)]:{cpu} = min(NodeCapacity:{cap_c} * staticReservedRatio:"
               f"{ratio(st_c_pct)}, NodeCapacity:{cap_c} * thresholdRatio:{ratio(strategy.midCPUThresholdPercent)})")
    mem_msg = (f"midAllocatable[Memory(GB)]:{giga(mem)} = min(NodeCapacity:{giga(cap_m)} * staticReservedRatio:"
               f"{ratio(st_m_pct)}, NodeCapacity:{giga(cap_m)} * thresholdRatio:"
               f"{ratio(strategy.midMemoryThresholdPercent)})")
    details = {"mode": MID_RECLAIM_STATIC, "capacity": [cap_c, cap_m]}
    return computed_items(NAME, SUFFIXES, ((cpu, cpu_msg), (mem, mem_msg)), details)
