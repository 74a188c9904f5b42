"""Colocation settings that fight each other, found before anyone enables them.

The slo-controller, the scheduler-extender and the descheduler each judge a node by its usage,
each against its own threshold. When the thresholds are out of order, one undoes what another
just did: batch pods are placed where they are at once suppressed or evicted, then placed
there again. Each finding names the settings, why they fight and a fix. Settings the
slo-controller accepts without acting on them are listed as warnings too.
"""

from __future__ import annotations

from dataclasses import dataclass

from .config import KEY_COLOCATION, KEY_THRESHOLD, WhatIfConfig

ERROR, WARNING = "error", "warning"


@dataclass(frozen=True)
class Finding:
    level: str
    settings: tuple[str, ...]
    problem: str
    fix: str

    def __str__(self) -> str:
        return f"{self.level}: {' vs '.join(self.settings)}: {self.problem} Fix: {self.fix}"


def _cluster_threshold(cfg: WhatIfConfig) -> dict:
    doc = cfg.slo.get(KEY_THRESHOLD) or {}
    return (doc.get("clusterStrategy") or {}) if isinstance(doc, dict) else {}


def _evicts_below_suppress(cluster_strategy: dict) -> bool:
    """Whether the node agent evicts BestEffort pods by CPU satisfaction measured against the
    limit CPU suppress sets (its own rule for when that strategy runs, on the cluster strategy the
    slo-controller makes of the ConfigMap; evictByAllocatable measures against the batch
    allocatable instead, which suppress does not lower)."""
    from koordcommon.schemas import ResourceThresholdStrategy
    from node_agent.qos.strategies.cpu_evict import EVICT_BY_ALLOCATABLE, satisfaction_problem

    strategy = ResourceThresholdStrategy.model_validate(cluster_strategy)
    return (strategy.enable and satisfaction_problem(strategy) is None
            and strategy.cpuEvictPolicy != EVICT_BY_ALLOCATABLE)


def check(cfg: WhatIfConfig) -> list[Finding]:
    """Every conflict between the configuration's thresholds (empty: none found)."""
    out: list[Finding] = []
    slo, slo_warnings = cfg.slo_config()  # the slo-controller's reading, once
    colo = cfg.slo.get(KEY_COLOCATION) or {}
    thr = _cluster_threshold(cfg)
    ext = cfg.extender_settings()
    la_cpu = ext.usage_thresholds.get("cpu", 0)
    la_mem = ext.usage_thresholds.get("memory", 0)
    colocation_on = bool(colo.get("enable", False))
    suppress_on = bool(thr.get("enable", False))
    suppress_cpu = int(thr.get("cpuSuppressThresholdPercent", 65))
    evict_mem = int(thr.get("memoryEvictThresholdPercent", 70))
    reclaim_cpu = int(colo.get("cpuReclaimThresholdPercent", 60))
    reclaim_mem = int(colo.get("memoryReclaimThresholdPercent", 65))

    if suppress_on and la_cpu and la_cpu > suppress_cpu:
        out.append(Finding(
            ERROR, (f"scheduler-extender usage_thresholds.cpu={la_cpu}", f"cpuSuppressThresholdPercent={suppress_cpu}"),
            f"the scheduler places batch pods on nodes up to {la_cpu} % CPU, but the node agent suppresses BestEffort "
            f"CPU from {suppress_cpu} %: pods land where they cannot run, starve, are evicted by satisfaction and land "
            "again.",
            f"set the load-aware CPU threshold at or below {suppress_cpu}, or raise cpuSuppressThresholdPercent.",
        ))  # fmt: skip
    if colocation_on and suppress_on and reclaim_cpu > suppress_cpu:
        if _evicts_below_suppress(slo.threshold.cluster):
            out.append(Finding(
                ERROR, (f"cpuReclaimThresholdPercent={reclaim_cpu}", f"cpuSuppressThresholdPercent={suppress_cpu}",
                        "cpuEvictBESatisfaction*"),
                f"batch-cpu is offered up to {reclaim_cpu} % of the node but BestEffort CPU is held below "
                f"{suppress_cpu} %: batch pods that use the CPU they were admitted for are suppressed, their "
                "satisfaction falls, they are evicted and placed again (an eviction loop).",
                f"keep cpuReclaimThresholdPercent at or below {suppress_cpu}.",
            ))  # fmt: skip
        else:
            out.append(Finding(
                WARNING, (f"cpuReclaimThresholdPercent={reclaim_cpu}", f"cpuSuppressThresholdPercent={suppress_cpu}"),
                f"batch-cpu is offered up to {reclaim_cpu} % of the node but BestEffort CPU is held below "
                f"{suppress_cpu} %: batch pods that use the CPU they were admitted for are throttled and run slower "
                "(no loop while BE CPU eviction by the suppressed limit is off; the replay shows what it costs in "
                "batch CPU-hours).",
                f"keep cpuReclaimThresholdPercent at or below {suppress_cpu}, or accept slower batch pods for more "
                "of them placed.",
            ))  # fmt: skip
    if colocation_on and suppress_on and reclaim_mem > evict_mem:
        out.append(Finding(
            ERROR, (f"memoryReclaimThresholdPercent={reclaim_mem}", f"memoryEvictThresholdPercent={evict_mem}"),
            f"batch-memory is offered up to {reclaim_mem} % of the node but BestEffort pods are evicted from "
            f"{evict_mem} %: a node that takes the batch memory it offers evicts it.",
            f"keep memoryReclaimThresholdPercent at or below {evict_mem}.",
        ))  # fmt: skip
    args = cfg.descheduler_args()
    if args is not None and not args.paused:
        for pool in args.nodePools:
            high_cpu = pool.highThresholds.get("cpu", 100)
            high_mem = pool.highThresholds.get("memory", 100)
            if la_cpu and la_cpu > high_cpu:
                out.append(Finding(
                    ERROR, (f"scheduler-extender usage_thresholds.cpu={la_cpu}",
                            f"descheduler {pool.name} highThresholds.cpu={high_cpu:g}"),
                    f"the scheduler fills nodes to {la_cpu} % CPU, the descheduler drains nodes above {high_cpu:g} %: "
                    "pods land, are evicted and land again (a migration loop).",
                    f"set the load-aware CPU threshold below {high_cpu:g} (leave room for usage to grow), or raise "
                    "the descheduler's high threshold.",
                ))  # fmt: skip
            if colocation_on and reclaim_cpu > high_cpu:
                out.append(Finding(
                    ERROR, (f"cpuReclaimThresholdPercent={reclaim_cpu}",
                            f"descheduler {pool.name} highThresholds.cpu={high_cpu:g}"),
                    f"batch capacity lets batch pods fill a node to {reclaim_cpu} % of its CPU, the descheduler drains "
                    f"nodes above {high_cpu:g} %: a node that takes the batch it is offered is drained, and its "
                    "batch capacity draws the evicted pods back (an eviction loop).",
                    f"keep cpuReclaimThresholdPercent at or below {high_cpu:g}, or raise the descheduler's high "
                    "CPU threshold above it.",
                ))  # fmt: skip
            if la_mem and la_mem > high_mem:
                out.append(Finding(
                    WARNING, (f"scheduler-extender usage_thresholds.memory={la_mem}",
                              f"descheduler {pool.name} highThresholds.memory={high_mem:g}"),
                    f"the scheduler fills nodes to {la_mem} % memory, the descheduler drains nodes above "
                    f"{high_mem:g} %.",
                    f"set the load-aware memory threshold below {high_mem:g}.",
                ))  # fmt: skip
            if suppress_on and high_cpu > suppress_cpu and pool.lowThresholds.get("cpu", 0) >= suppress_cpu:
                out.append(Finding(
                    WARNING, (f"descheduler {pool.name} lowThresholds.cpu={pool.lowThresholds.get('cpu'):g}",
                              f"cpuSuppressThresholdPercent={suppress_cpu}"),
                    "the descheduler counts nodes as low (targets) that already suppress BestEffort CPU: moved "
                    "batch pods arrive where they are throttled.",
                    f"keep the descheduler's low CPU threshold below {suppress_cpu}.",
                ))  # fmt: skip
    if colocation_on and not suppress_on:
        out.append(Finding(
            WARNING, ("colocation-config enable=true", "resource-threshold-config enable=false"),
            "batch capacity is offered but nothing holds BestEffort pods back when online load rises: online pods "
            "compete with batch for CPU.",
            "enable the resource-threshold strategy (CPU suppress, memory eviction).",
        ))  # fmt: skip
    # what the slo-controller and the descheduler take without acting on it (each logs it): not
    # a fight, but a setting its writer expects to work
    for warning in slo_warnings:
        out.append(Finding(
            WARNING, ("slo-controller-config",), f"accepted without effect: {warning}.",
            "remove the setting from the ConfigMap (where the message names one, set the service's own setting "
            "instead).",
        ))  # fmt: skip
    loaded = cfg.descheduler_config()
    for warning in loaded.warnings if loaded is not None else []:
        out.append(Finding(WARNING, ("descheduler",), f"accepted without effect: {warning}.",
                           "remove the setting from the descheduler's configuration."))
    return out


__all__ = ["ERROR", "WARNING", "Finding", "check"]
