"""CPU burst for LS pods (koordlet qosmanager/plugins/cpuburst).

Every round, for the running containers of pods that may burst (no qosClass label, LS or
SYSTEM; phase Pending or Running), with the pod annotation `koordinator.sh/cpuBurst` merged
over the node's cpuBurstStrategy:

* static burst: cfs_burst_us (v2 cpu.max.burst) = limit cores x cpuBurstPercent% x 100000 when
  the policy is cpuBurstOnly or auto, else 0; the pod dir gets the sum.
* cfs quota burst, between the base quota (limit x 100000 / 1000) and cfsQuotaBurstPercent% of
  it: with policy cfsQuotaBurstOnly or auto a throttled container's quota grows x1.2, unless its
  limiter has no budget left (then x0.8); the node's share pool (the CPUs less the LSE/LSR pods'
  requests, used by all but LSE/LSR/BE pods) overloaded at sharePoolThresholdPercent turns growth
  and holding into x0.8, cooling (at 90 % of that threshold or unknown) turns growth into
  holding. With any other policy the quota goes back to its base: a raised quota is reset once
  the policy no longer allows it. The pod dir moves by the same delta, raised before its
  container and lowered after it.
* the limiter (cfsQuotaBurstPeriodSeconds >= 0): a token bucket per container holding
  period x (cfsQuotaBurstPercent - 100) tokens; each whole second at usage u % of the limit
  costs u - 100 tokens when u >= 100 and saves 100 - u when u < 60; growth needs a positive
  balance. It starts a random share (under half) full (here: a share fixed by the container's
  dir), restarts when its capacity changes and is dropped after 2 x period unused. Round code
  advances it (`advance_limiters`); `plan` reads this round's balances from the state.

A container whose quota is unlimited (-1) or unreadable is left alone.
"""

from __future__ import annotations

import hashlib

from koordcommon.cpus import json_annotation
from koordcommon.model import QoSClass
from koordcommon.schemas import CPUBurstStrategy, NodeSLOSpec

from ..model import CFS_PERIOD_US, BurstLimiter, CgroupWrite, PodState, QoSState

NAME = "cpu_burst"
ANNOTATION = "koordinator.sh/cpuBurst"
SCALE_UP = 1.2
SCALE_DOWN = 0.8
COOLING_RATIO = 0.9
CONSUME_FROM_PERCENT = 100
SAVE_BELOW_PERCENT = 60
POLICIES = ("none", "cpuBurstOnly", "cfsQuotaBurstOnly", "auto")

OVERLOAD, COOLING, IDLE, UNKNOWN = "overload", "cooling", "idle", "unknown"
# the classes as tuples made once: an Enum member looked up through its class costs about 0.3 us
# on Python 3.11, and these are tested per pod per round
_NO_BURST = (QoSClass.LSR, QoSClass.LSE, QoSClass.BE)
_BOUND = (QoSClass.LSE, QoSClass.LSR)
UP, DOWN, REMAIN, RESET = "up", "down", "remain", "reset"


def eligible(p: PodState) -> bool:
    return p.raw_qos not in _NO_BURST and p.info.phase in ("Pending", "Running")


# Koordinator's CPUBurstConfig, what the annotation may set (the share pool threshold is the node's);
# any other field is named in a warning.
POD_FIELDS = {"policy": None, "cpuBurstPercent": None, "cfsQuotaBurstPercent": None, "cfsQuotaBurstPeriodSeconds": None}


def pod_config(p: PodState, node: CPUBurstStrategy) -> CPUBurstStrategy:
    raw = p.info.annotation(ANNOTATION)
    override = json_annotation({ANNOTATION: raw}, ANNOTATION, POD_FIELDS) if raw else None
    if not override:
        return node
    try:
        return node.model_copy(update={k: v for k, v in override.items() if k in POD_FIELDS})
    except (ValueError, AttributeError, TypeError):
        return node


def static_enabled(policy: str) -> bool:
    return policy in ("cpuBurstOnly", "auto")


def quota_burst_enabled(policy: str) -> bool:
    return policy in ("cfsQuotaBurstOnly", "auto")


def burst_us(limit_milli: int, percent: int) -> int:
    return int((limit_milli / 1000) * (percent / 100) * CFS_PERIOD_US)


def base_quota(limit_milli: int) -> int:
    return limit_milli * CFS_PERIOD_US // 1000


def share_pool_state(state: QoSState, threshold: int) -> str:
    """overload | cooling | idle | unknown, from the usage of the CPUs not held by LSE/LSR pods."""
    if state.node_usage is None:
        return UNKNOWN
    total = (len(state.processors) * 1000) if state.processors else state.capacity.cpu_milli
    used = state.node_usage.cpu_milli
    for p in state.pods:
        q = p.raw_qos
        if q in _BOUND:
            total -= p.info.requests.cpu_milli
        if q in _NO_BURST and p.usage is not None:  # LSE, LSR and BE: not in the share pool
            used -= p.usage.cpu_milli
    ratio = used / total if total > 0 else 1.0
    if ratio >= threshold / 100:
        return OVERLOAD
    if ratio >= threshold / 100 * COOLING_RATIO:
        return COOLING
    return IDLE


# --------------------------------------------------------------------------- the limiter


def limiter_configured(cfg: CPUBurstStrategy) -> bool:
    return cfg.cfsQuotaBurstPeriodSeconds is not None and cfg.cfsQuotaBurstPeriodSeconds >= 0


def new_limiter(key: str, period_s: int, percent: int, now_ms: int) -> BurstLimiter:
    capacity = period_s * (percent - 100)
    share = int.from_bytes(hashlib.sha256(key.encode()).digest()[:4], "big") / (1 << 32) / 2  # [0, 0.5)
    return BurstLimiter(capacity, int(capacity * share), now_ms, 2 * period_s * 1000)


def consume(limiter: BurstLimiter, now_ms: int, usage_percent: int) -> BurstLimiter:
    elapsed_s = (now_ms - limiter.updated_ms) // 1000  # whole seconds, as koordlet truncates them
    tokens = limiter.tokens
    if usage_percent >= CONSUME_FROM_PERCENT:
        tokens -= (usage_percent - 100) * elapsed_s
    elif usage_percent < SAVE_BELOW_PERCENT:
        tokens += (100 - usage_percent) * elapsed_s
    tokens = max(min(tokens, limiter.capacity), -limiter.capacity)
    return BurstLimiter(limiter.capacity, tokens, now_ms, limiter.expire_ms)


def _running_containers(p: PodState):
    """(container spec, its dir) for the containers that have a dir and a cpu limit."""
    for c in p.info.containers:
        rel = p.containers.get(c.name)
        if rel is not None and c.limits.cpu_milli > 0:
            yield c, rel


def advance_limiters(state: QoSState, slo: NodeSLOSpec | None, limiters: dict[str, BurstLimiter]
                     ) -> dict[str, BurstLimiter]:
    """This round's limiters: each burstable container's budget moved by its usage, unused ones dropped."""
    out: dict[str, BurstLimiter] = {}
    if slo is not None:
        for p in state.pods:
            if not eligible(p):
                continue
            cfg = pod_config(p, slo.cpuBurstStrategy)
            if not limiter_configured(cfg) or cfg.cfsQuotaBurstPercent < 100:
                continue
            for c, rel in _running_containers(p):
                if _int(state.read(rel, "cpu.cfs_quota_us")) is None:
                    continue
                period, percent = cfg.cfsQuotaBurstPeriodSeconds, cfg.cfsQuotaBurstPercent
                lim = limiters.get(rel)
                if lim is None or lim.capacity != period * (percent - 100):
                    lim = new_limiter(rel, period, percent, state.now_ms)
                used = p.container_usage.get(c.name)
                limit = c.limits.cpu_milli
                percent_used = int((used.cpu_milli if used is not None else limit) / limit * 100)
                out[rel] = consume(lim, state.now_ms, percent_used)
    for rel, lim in limiters.items():  # kept until unused for 2 x period
        if rel not in out and state.now_ms - lim.updated_ms <= lim.expire_ms:
            out[rel] = lim
    return out


# --------------------------------------------------------------------------- the plan


def operation(cfg: CPUBurstStrategy, p: PodState, rel: str, state: QoSState) -> str:
    if not quota_burst_enabled(cfg.policy):
        return RESET
    if limiter_configured(cfg):
        lim = state.burst_limiters.get(rel)
        if cfg.cfsQuotaBurstPercent < 100 or lim is None or not lim.allows:
            return DOWN
    if p.throttled_ratio is None:
        return REMAIN
    return UP if p.throttled_ratio > 0 else REMAIN


def by_node(pool: str, op: str) -> str:
    if pool == OVERLOAD and op in (UP, REMAIN):
        return DOWN
    if pool in (COOLING, UNKNOWN) and op == UP:
        return REMAIN
    return op


def plan(state: QoSState, slo: NodeSLOSpec) -> list[CgroupWrite]:
    node_cfg = slo.cpuBurstStrategy
    writes: list[CgroupWrite] = []
    pool = share_pool_state(state, node_cfg.sharePoolThresholdPercent)
    for p in state.pods:
        if not eligible(p):
            continue
        cfg = pod_config(p, node_cfg)
        writes += _static(p, cfg, state)
        writes += _quota(p, cfg, state, pool)
    return writes


def _static(p: PodState, cfg: CPUBurstStrategy, state: QoSState) -> list[CgroupWrite]:
    out = []
    total = 0
    enabled = static_enabled(cfg.policy)
    for c in p.info.containers:
        rel = p.containers.get(c.name)
        if rel is None:
            continue
        b = burst_us(c.limits.cpu_milli, cfg.cpuBurstPercent) if enabled and c.limits.cpu_milli > 0 else 0
        total += b
        if _needed(state, rel, b):
            out.append(CgroupWrite(rel, "cpu.cfs_burst_us", b, NAME, "container"))
    if _needed(state, p.rel, total):
        out.append(CgroupWrite(p.rel, "cpu.cfs_burst_us", total, NAME, "pod"))
    return out


def _needed(state: QoSState, rel: str, burst: int) -> bool:
    """A zero where the kernel has no such file, or already holds zero, needs no write (nor a
    report); judged before a write is built, as with policy none no burst is written at all."""
    return burst != 0 or state.read(rel, "cpu.cfs_burst_us") not in (None, "0")


def _quota(p: PodState, cfg: CPUBurstStrategy, state: QoSState, pool: str) -> list[CgroupWrite]:
    out: list[CgroupWrite] = []
    pod_quota = _int(state.read(p.rel, "cpu.cfs_quota_us"))
    for c, rel in _running_containers(p):
        current = _int(state.read(rel, "cpu.cfs_quota_us"))
        if current is None or current <= 0:
            continue
        base = base_quota(c.limits.cpu_milli)
        ceil = int(base * cfg.cfsQuotaBurstPercent / 100) if cfg.cfsQuotaBurstPercent > 100 else base
        op = by_node(pool, operation(cfg, p, rel, state))
        target = {UP: int(current * SCALE_UP), DOWN: int(current * SCALE_DOWN), RESET: base}.get(op, current)
        target = max(base, min(target, ceil))
        if target == current:
            continue
        delta = target - current
        container = CgroupWrite(rel, "cpu.cfs_quota_us", target, NAME, "container")
        if pod_quota is None or pod_quota <= 0:  # an unlimited pod dir stays so
            out.append(container)
            continue
        pod_quota += delta
        pod = CgroupWrite(p.rel, "cpu.cfs_quota_us", pod_quota, NAME, "pod")
        out += [pod, container] if delta > 0 else [container, pod]  # the pod is never tighter than its child
    return out


def _int(text: str | None) -> int | None:
    if text is None or text == "":
        return None
    try:
        return int(text)
    except ValueError:
        return None
