"""CPU eviction (koordlet qosmanager/plugins/cpuevict): three rules, each on when its fields are set.

BECPUEvict (cpuEvictBESatisfactionLower/UpperPercent): satisfaction = BE limit / BE request,
the limit being the BE real limit (cpuEvictPolicy evictByRealLimit) or the node's batch-cpu
allocatable (evictByAllocatable). When it is at or below the lower percent while BE usage is
at least cpuEvictBEUsageThresholdPercent (90) of that limit, over the window and now, release
request x (upper - satisfaction), the smaller of the windowed and current figures, by
evicting BE pods: lower spec.priority first, equal or unknown priority by usage/request,
largest first; each releases its batch-cpu request.

CPUAllocatableEvict (cpuAllocatableEvictThreshold/LowerPercent, allocatableEvictPriorityThreshold):
when the batch-cpu (mid-cpu) requested by pods at or under the priority threshold exceeds
threshold % of the node's batch-cpu (mid-cpu) allocatable, release requested - lower % of it;
eviction-enabled victims, largest request last in each tie, each releasing its request.

CPUEvict (cpuEvictThresholdPercent, evictEnabledPriorityThreshold): when the node's cpu usage,
averaged over cpuEvictTimeWindowSeconds, reaches the threshold % of capacity, release
capacity x (usage% - lower) / 100 (lower = threshold - 2 unless set); eviction-enabled
victims, largest usage first in each tie, each releasing its usage.

One 20 s cool-down follows any eviction, and the first one only runs 20 s after QoS started.
"""

from __future__ import annotations

from koordcommon.schemas import NodeSLOSpec, ResourceThresholdStrategy

from ..model import BESample, Eviction, PodState, QoSState
from . import eviction
from .eviction import REQUEST, USED, EvictTask

NAME = "cpu_evict"
COOL_DOWN = NAME  # koordlet's BECPUEvict, CPUEvict and CPUAllocatableEvict share this clock
COOL_DOWN_MS = 20_000
DEFAULT_USAGE_THRESHOLD = 90
LAST_WITHIN_MS = 2_000
RELEASE_BUFFER_PERCENT = 2
MID_PRIORITY_MAX = 7999
EVICT_BY_ALLOCATABLE = "evictByAllocatable"
MIN_BATCH_ALLOCATABLE = 1  # a zero batch-cpu allocatable still gives a satisfaction


# --------------------------------------------------------------------------- configuration
# Each rule's check: None when it is configured and valid (it runs), "" when its fields are
# unset (it is off), else why the configuration is refused (it is off, and the agent says so).


def satisfaction_problem(cfg: ResourceThresholdStrategy) -> str | None:
    lower, upper = cfg.cpuEvictBESatisfactionLowerPercent, cfg.cpuEvictBESatisfactionUpperPercent
    if lower is None and upper is None:
        return ""
    if lower is None or upper is None:
        return "cpuEvictBESatisfactionLowerPercent and cpuEvictBESatisfactionUpperPercent must both be set"
    if not 0 < lower <= 60:
        return f"cpuEvictBESatisfactionLowerPercent {lower} outside (0, 60]"
    if not 0 < upper < 100:
        return f"cpuEvictBESatisfactionUpperPercent {upper} outside (0, 100)"
    if upper < lower:
        return f"cpuEvictBESatisfactionUpperPercent {upper} below the lower percent {lower}"
    return None


def usage_problem(cfg: ResourceThresholdStrategy) -> str | None:
    threshold = cfg.cpuEvictThresholdPercent
    if threshold is None:
        return ""
    if cfg.evictEnabledPriorityThreshold is None:
        return "cpuEvictThresholdPercent is set but evictEnabledPriorityThreshold is not"
    if threshold < 0:
        return f"cpuEvictThresholdPercent {threshold} below 0"
    lower = cfg.cpuEvictLowerPercent if cfg.cpuEvictLowerPercent is not None else threshold - RELEASE_BUFFER_PERCENT
    if lower >= threshold:
        return f"cpuEvictLowerPercent {lower} not below cpuEvictThresholdPercent {threshold}"
    return None


def allocatable_problem(threshold: int | None, lower: int | None, priority: int | None, prefix: str) -> str | None:
    """A *AllocatableEvict rule (prefix: cpu | memory)."""
    if threshold is None:
        return ""
    if lower is None or priority is None:
        return (f"{prefix}AllocatableEvictThresholdPercent is set but {prefix}AllocatableEvictLowerPercent or "
                "allocatableEvictPriorityThreshold is not")
    if threshold < 0:
        return f"{prefix}AllocatableEvictThresholdPercent {threshold} below 0"
    if lower >= threshold:
        return f"{prefix}AllocatableEvictLowerPercent {lower} not below {prefix}AllocatableEvictThresholdPercent"
    if priority > MID_PRIORITY_MAX:
        return f"allocatableEvictPriorityThreshold {priority} above {MID_PRIORITY_MAX}: prod pods are never evicted"
    return None


def cpu_allocatable_problem(cfg: ResourceThresholdStrategy) -> str | None:
    return allocatable_problem(cfg.cpuAllocatableEvictThresholdPercent, cfg.cpuAllocatableEvictLowerPercent,
                               cfg.allocatableEvictPriorityThreshold, "cpu")


# --------------------------------------------------------------------------- BECPUEvict


def usage_high_enough(usage: float, limit: float, threshold_percent: int) -> bool:
    if limit <= 0:
        return False
    if limit < 1000:
        return True
    return usage / limit >= threshold_percent / 100


def release_by(request: float, limit: float, lower: int, upper: int) -> int:
    if request <= 0:
        return 0
    satisfaction = limit / request
    if satisfaction > lower / 100:
        return 0
    gap = upper / 100 - satisfaction
    if gap <= 0:
        return 0
    return int(request * gap)


def be_allocatable_limit(state: QoSState) -> float:
    """The node's batch-cpu allocatable as a BE limit: -1 when unpublished, 1 when zero."""
    value = state.tier_allocatable.get("batch-cpu")
    if value is None or value < 0:
        return -1
    return value if value > 0 else MIN_BATCH_ALLOCATABLE


def window(state: QoSState, cfg: ResourceThresholdStrategy) -> tuple[int, list[BESample]]:
    """(window seconds, the samples in it): cpuEvictTimeWindowSeconds, at least the collect interval."""
    interval = max(int(state.collect_interval_s), 1)
    window_s = max(interval, cfg.cpuEvictTimeWindowSeconds or 0)
    since = state.now_ms - window_s * 1000
    return window_s, [s for s in state.be_history if s.ts_ms >= since]


def release_milli(state: QoSState, slo: NodeSLOSpec, record: dict | None = None) -> int:
    """BE milli-cpu to release; `record` receives the satisfaction inputs (explanations)."""
    cfg = slo.resourceUsedThresholdWithBE
    if satisfaction_problem(cfg) is not None:
        return 0
    lower, upper = cfg.cpuEvictBESatisfactionLowerPercent, cfg.cpuEvictBESatisfactionUpperPercent
    threshold = cfg.cpuEvictBEUsageThresholdPercent or DEFAULT_USAGE_THRESHOLD
    interval = max(int(state.collect_interval_s), 1)
    window_s, hist = window(state, cfg)
    if not hist or len(hist) * interval < window_s // 3:
        return 0
    by_allocatable = cfg.cpuEvictPolicy == EVICT_BY_ALLOCATABLE
    allocatable = be_allocatable_limit(state)
    avg_usage = sum(s.usage for s in hist) / len(hist)
    avg_limit = allocatable if by_allocatable else sum(s.real_limit for s in hist) / len(hist)
    avg_req = sum(s.request for s in hist) / len(hist)
    if record is not None:
        record.update({
            "policy": cfg.cpuEvictPolicy, "window_s": window_s, "be_usage": round(avg_usage), "be_limit": round(avg_limit),
            "be_request": round(avg_req), "satisfaction_percent": round(avg_limit * 100 / avg_req, 1) if avg_req else None,
            "satisfaction_lower_percent": lower, "satisfaction_upper_percent": upper,
            "be_usage_threshold_percent": threshold,
        })  # fmt: skip
    if not usage_high_enough(avg_usage, avg_limit, threshold):
        return 0
    release = release_by(avg_req, avg_limit, lower, upper)
    if release <= 0:
        return 0
    last = state.be_history[-1]
    if state.now_ms - last.ts_ms > LAST_WITHIN_MS:
        return 0
    last_limit = allocatable if by_allocatable else last.real_limit
    if not usage_high_enough(last.usage, last_limit, threshold):
        return 0
    if last.request == avg_req and last_limit == avg_limit:
        return release
    current = release_by(last.request, last_limit, lower, upper)
    return min(release, current) if current > 0 else 0


def _be_request(p: PodState) -> int:
    return sum(max(c.batch_requests.cpu_milli, 0) for c in p.info.containers)


def be_victims(state: QoSState) -> list[PodState]:
    victims = [p for p in state.pods if p.is_be and eviction.policy_allows(p, "BECPUEvict")]

    def usage_ratio(p) -> float:
        req = _be_request(p)
        used = p.usage.cpu_milli if p.usage else 0
        return used / req if req > 0 else 0.0

    def key(p):
        # priority ascending when every victim has one; koordlet compares pairs, which equals this
        # total order whenever priorities are all set or all missing
        prio = p.info.priority if p.info.priority is not None else 0
        return (prio, -usage_ratio(p))

    return sorted(victims, key=key)


def be_task(state: QoSState, slo: NodeSLOSpec) -> EvictTask | None:
    inputs: dict = {}
    release = release_milli(state, slo, inputs)
    if release <= 0:
        return None
    return EvictTask("BECPUEvict", f"BECPUEvict: BE cpu satisfaction low: release {release}m", be_victims(state),
                     {"batch-cpu": release}, REQUEST, lambda p: {"batch-cpu": _be_request(p)}, inputs)


# --------------------------------------------------------------------------- CPUAllocatableEvict


def allocatable_task(state: QoSState, slo: NodeSLOSpec) -> EvictTask | None:
    cfg = slo.resourceUsedThresholdWithBE
    return eviction.allocatable_task(state, cfg, "cpu", "CPUAllocatableEvict", cfg.cpuAllocatableEvictThresholdPercent,
                                     cfg.cpuAllocatableEvictLowerPercent, cpu_allocatable_problem(cfg))


# --------------------------------------------------------------------------- CPUEvict


def usage_release(state: QoSState, cfg: ResourceThresholdStrategy) -> tuple[int, int]:
    """(node cpu usage % over the window, milli-cpu to release)."""
    _, hist = window(state, cfg)
    values = [s.node_cpu for s in hist if s.node_cpu is not None]
    cap = state.capacity.cpu_milli
    if not values or cap <= 0:
        return 0, 0
    usage_pct = int(sum(values) / len(values)) * 100 // cap
    threshold = cfg.cpuEvictThresholdPercent
    if usage_pct < threshold:
        return usage_pct, 0
    lower = cfg.cpuEvictLowerPercent if cfg.cpuEvictLowerPercent is not None else threshold - RELEASE_BUFFER_PERCENT
    return usage_pct, cap * (usage_pct - lower) // 100


def usage_task(state: QoSState, slo: NodeSLOSpec) -> EvictTask | None:
    cfg = slo.resourceUsedThresholdWithBE
    if usage_problem(cfg) is not None:
        return None
    usage_pct, release = usage_release(state, cfg)
    if release <= 0:
        return None
    victims = eviction.generic_victims(state.pods, "CPUEvict", cfg.evictEnabledPriorityThreshold,
                                       lambda p: p.usage.cpu_milli)
    lower = cfg.cpuEvictLowerPercent if cfg.cpuEvictLowerPercent is not None else (
        cfg.cpuEvictThresholdPercent - RELEASE_BUFFER_PERCENT)
    inputs = {"node_usage_percent": usage_pct, "threshold_percent": cfg.cpuEvictThresholdPercent,
              "lower_percent": lower, "capacity": state.capacity.cpu_milli,
              "priority_threshold": cfg.evictEnabledPriorityThreshold}  # fmt: skip
    return EvictTask("CPUEvict", f"CPUEvict: node cpu usage {usage_pct}% >= {cfg.cpuEvictThresholdPercent}%: "
                     f"release {release}m", victims, {"cpu": release}, USED, lambda p: {"cpu": p.usage.cpu_milli},
                     inputs)


def plan(state: QoSState, slo: NodeSLOSpec) -> list[Eviction]:
    if not slo.resourceUsedThresholdWithBE.enable:
        return []
    # koordlet: the clock starts at agent start, so there is no CPU eviction in the first cool-down
    last = max(state.last_evict_ms.get(COOL_DOWN, 0), state.started_ms)
    if state.now_ms - last < COOL_DOWN_MS or state.capacity.cpu_milli <= 0:
        return []
    tasks = [t for t in (be_task(state, slo), allocatable_task(state, slo), usage_task(state, slo)) if t is not None]
    return eviction.evict(tasks, NAME, COOL_DOWN, state.pending_evictions)
