"""BatchResource: `batch-cpu` / `batch-memory`, what HP pods reserved but do not use.

    batch = max(capacity - safetyMargin - max(systemUsed, nodeReserved) - HP, 0)

with safetyMargin = capacity x (100 - reclaimThresholdPercent) / 100 (negative above 100,
not clamped, as in Koordinator), HP by usage, request or max(usage, request) per policy,
and the `request` policy (memory only) using nodeReserved instead of the system term. The
`predict` policy (not Koordinator's) takes HP as the node's predicted HP peak (`peak.py`) with
the usage policy's system term.
When the node reports NUMA zones, the same rule runs per zone (`batch_numa`).
"""

from __future__ import annotations

from koordcommon import resources as rn

from .. import peak
from ..config import ColocationStrategy
from ..snapshot import NodeSnapshot, hp_pods
from . import ResourceItems, batch_numa, computed_items, giga, ratio, reset_items, trunc_percent

NAME = "batch"
SUFFIXES = (rn.BATCH_CPU_SUFFIX, rn.BATCH_MEMORY_SUFFIX)
DEGRADE_MESSAGE = "degrade node resource because of abnormal nodeMetric, reason: degradedByBatchResource"


def calculate(snapshot: NodeSnapshot, strategy: ColocationStrategy) -> ResourceItems:
    if snapshot.metric_stale(strategy.degrade_after_ms):
        return reset_items(NAME, SUFFIXES, DEGRADE_MESSAGE, True, "degradedByBatchResource")
    metric = snapshot.metric
    cap_c, cap_m = snapshot.capacity()
    margin_c = trunc_percent(cap_c, 100 - strategy.cpuReclaimThresholdPercent)
    margin_m = trunc_percent(cap_m, 100 - strategy.memoryReclaimThresholdPercent)
    res_c, res_m = snapshot.node_reserved()
    sys_c = metric.system_usage[0] + metric.host_hp_usage[0]
    sys_m = metric.system_usage[1] + metric.host_hp_usage[1]
    sor_c = max(sys_c, res_c)
    sor_m = max(sys_m, res_m)
    t = snapshot.totals()
    used_c, used_m = t.hp_used
    req_c, req_m = t.hp_request
    mur_c, mur_m = t.hp_max_used_request
    cpu_policy, mem_policy = strategy.cpuCalculatePolicy, strategy.memoryCalculatePolicy
    cpu_cap_pct, mem_cap_pct = strategy.batchCPUThresholdPercent, strategy.batchMemoryThresholdPercent

    predicted = peak.predict(snapshot, snapshot.hp_history) if "predict" in (cpu_policy, mem_policy) else None

    # CPU: `request` is not a CPU policy; anything but maxUsageRequest or predict computes by usage.
    if cpu_policy == "predict":
        hp_c = predicted.cpu
    else:
        hp_c = mur_c if cpu_policy == "maxUsageRequest" else used_c
    cpu = max(cap_c - margin_c - sor_c - hp_c, 0)
    if cpu_cap_pct is not None:
        cpu = min(cpu, trunc_percent(cap_c, cpu_cap_pct))
    if mem_policy == "request":
        mem = max(cap_m - margin_m - res_m - req_m, 0)
    elif mem_policy == "maxUsageRequest":
        mem = max(cap_m - margin_m - sor_m - mur_m, 0)
    elif mem_policy == "predict":
        mem = max(cap_m - margin_m - sor_m - predicted.memory, 0)
    else:
        mem = max(cap_m - margin_m - sor_m - used_m, 0)
    if mem_cap_pct is not None:
        mem = min(mem, trunc_percent(cap_m, mem_cap_pct))

    def cpu_message() -> str:
        hp_term = {"maxUsageRequest": "podHPMaxUsedRequest", "predict": "podHPPredictedPeak"}.get(cpu_policy, "podHPUsed")
        msg = (f"nodeCapacity:{cap_c} - nodeSafetyMargin:{margin_c} - "
               f"systemUsageOrNodeReserved:{sor_c} - {hp_term}:{hp_c}")
        if cpu_cap_pct is not None:
            msg = f"min(nodeCapacity:{cap_c} * thresholdRatio:{ratio(cpu_cap_pct)}, {msg})"
        return f"batchAllocatable[CPU(Milli-Core)]:{cpu} = {msg}"

    def memory_message() -> str:
        if mem_policy == "request":
            terms = f"nodeReserved:{giga(res_m)} - podHPRequest:{giga(req_m)}"
        elif mem_policy == "predict":
            terms = f"systemUsage:{giga(sor_m)} - podHPPredictedPeak:{giga(predicted.memory)}"
        elif mem_policy == "maxUsageRequest" or mem_cap_pct is not None:
            # QUIRK kept from Koordinator: with a memory cap, the usage policy's message names
            # and prints podHPMaxUsedRequest although the formula subtracts podHPUsed.
            terms = f"systemUsage:{giga(sor_m)} - podHPMaxUsedRequest:{giga(mur_m)}"
        else:
            terms = f"systemUsage:{giga(sor_m)} - podHPUsed:{giga(used_m)}"
        msg = f"nodeCapacity:{giga(cap_m)} - nodeSafetyMargin:{giga(margin_m)} - {terms}"
        if mem_cap_pct is not None:
            msg = f"min(nodeCapacity:{giga(cap_m)} * thresholdRatio:{ratio(mem_cap_pct)}, {msg})"
        return f"batchAllocatable[Mem(GB)]:{giga(mem)} = {msg}"

    def inputs() -> dict:
        return {
            "capacity": [cap_c, cap_m],
            "safetyMargin": [margin_c, margin_m],
            "systemUsed": [sys_c, sys_m],
            "nodeReserved": [res_c, res_m],
            "podHPUsed": [used_c, used_m],
            "podHPRequest": [req_c, req_m],
            "podHPMaxUsedRequest": [mur_c, mur_m],
            "cpuCalculatePolicy": cpu_policy,
            "memoryCalculatePolicy": mem_policy,
            "podsWithoutMetric": t.pods_without_metric,
            "danglingMetrics": t.dangling_metrics,
            "cpuReclaimThresholdPercent": strategy.cpuReclaimThresholdPercent,
            "memoryReclaimThresholdPercent": strategy.memoryReclaimThresholdPercent,
            "batchCPUThresholdPercent": cpu_cap_pct,
            "batchMemoryThresholdPercent": mem_cap_pct,
            "batch": [cpu, mem],
            "hpPods": hp_pods(snapshot.pods, metric),
        } | (predicted.inputs() if predicted is not None else {})

    zones = tuple((name, {SUFFIXES[0]: zc, SUFFIXES[1]: zm})
                  for name, zc, zm in batch_numa.calculate_zones(snapshot, strategy))
    return computed_items(NAME, SUFFIXES, ((cpu, cpu_message), (mem, memory_message)), inputs, zones)
