"""BE CPU eviction by satisfaction (koordlet qosmanager/plugins/cpuevict, BECPUEvict).

satisfaction = BE real limit / BE request. When it is at or below the lower percent while
BE usage is at least 90 % of the limit (over the window and now), release
request x (upper - satisfaction) (the smaller of the windowed and current figures) by
evicting BE pods: lower spec.priority first, equal or unknown priority by usage/request,
largest first. A 20 s cool-down follows every eviction.
"""

from __future__ import annotations

from koordcommon.resources import Resources
from koordcommon.schemas import NodeSLOSpec

from ..model import BESample, Eviction, QoSState

NAME = "cpu_evict"
COOL_DOWN = NAME  # koordlet's BECPUEvict, CPUEvict and CPUAllocatableEvict share this clock
COOL_DOWN_MS = 20_000
DEFAULT_USAGE_THRESHOLD = 90
LAST_WITHIN_MS = 2_000


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


def release_milli(state: QoSState, slo: NodeSLOSpec) -> int:
    cfg = slo.resourceUsedThresholdWithBE
    lower, upper = cfg.cpuEvictBESatisfactionLowerPercent, cfg.cpuEvictBESatisfactionUpperPercent
    if lower is None or upper is None or not (0 < lower <= 60) or not (0 < upper < 100) or upper < lower:
        return 0  # koordlet: the satisfaction bounds are required and validated
    threshold = cfg.cpuEvictBEUsageThresholdPercent or DEFAULT_USAGE_THRESHOLD
    interval = max(int(state.collect_interval_s), 1)
    window_s = max(interval, cfg.cpuEvictTimeWindowSeconds or 0)
    since = state.now_ms - window_s * 1000
    hist: list[BESample] = [s for s in state.be_history if s.ts_ms >= since]
    if not hist or len(hist) * interval < window_s // 3:
        return 0
    avg_usage = sum(s.usage for s in hist) / len(hist)
    avg_limit = sum(s.real_limit for s in hist) / len(hist)
    avg_req = sum(s.request for s in hist) / len(hist)
    if not usage_high_enough(avg_usage, avg_limit, threshold):
        return 0
    release = release_by(avg_req, avg_limit, lower, upper)
    if release <= 0:
        return 0
    last = state.be_history[-1]
    if state.now_ms - last.ts_ms > LAST_WITHIN_MS or not usage_high_enough(last.usage, last.real_limit, threshold):
        return 0
    if last.request == avg_req and last.real_limit == avg_limit:
        return release
    current = release_by(last.request, last.real_limit, lower, upper)
    return min(release, current) if current > 0 else 0


def plan(state: QoSState, slo: NodeSLOSpec) -> list[Eviction]:
    if not slo.resourceUsedThresholdWithBE.enable:
        return []
    # koordlet: the clock starts at agent start, so there is no CPU eviction in the first cool-down
    last = max(state.last_evict_ms.get(COOL_DOWN, 0), state.started_ms)
    if state.now_ms - last < COOL_DOWN_MS or state.capacity.cpu_milli <= 0:
        return []
    release = release_milli(state, slo)
    if release <= 0:
        return []
    victims = [p for p in state.pods if p.is_be]

    def usage_ratio(p) -> float:
        req = p.info.batch_requests.cpu_milli
        used = p.usage.cpu_milli if p.usage else 0
        return used / req if req > 0 else 0.0

    def key(p):
        # priority ascending when every victim has one; koordlet compares pairs, which equals this
        # total order whenever priorities are all set or all missing
        prio = p.info.priority if p.info.priority is not None else 0
        return (prio, -usage_ratio(p))

    victims.sort(key=key)
    out: list[Eviction] = []
    released = 0
    for p in victims:
        if released >= release:
            break
        req = p.info.batch_requests.cpu_milli
        out.append(
            Eviction(
                p.info.uid,
                p.info.namespace,
                p.info.name,
                NAME,
                COOL_DOWN,
                f"BE cpu satisfaction low: release {release}m",
                Resources(req, 0),
            )
        )
        released += req
    return out
