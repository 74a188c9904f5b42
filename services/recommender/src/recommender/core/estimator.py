"""VPA's estimator chain: percentile -> + margin -> confidence multiplier (bounds only)
-> max(., per-pod minimum / containers per pod) (logic/estimator.go, logic/recommender.go).

Amounts follow VPA's ResourceAmount: integer milli-cores and bytes, truncated after every step
and capped at VPA's MaxResourceAmount (1e14), not at the histograms' last bucket: a bound
multiplied past the largest usage a histogram holds is what VPA reports too. With no history
(confidence 0) the upper bound's multiplier is +Inf and the lower bound's 0, as VPA computes
them: a container with samples but no history span gets the 1e14 upper bound, and one with
no sample at all (0 x +Inf is no amount in VPA) gets the minimums.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from koordcommon.bounds import MAX_RECOMMENDED_AMOUNT

from .aggregate import MIB, AggregateState

# VPA's model.MaxResourceAmount: the largest amount of either resource (milli-cores, bytes); the
# bus's value ranges accept it as an upper bound (koordcommon.bounds), so it is defined there.
MAX_RESOURCE_AMOUNT = MAX_RECOMMENDED_AMOUNT


@dataclass(frozen=True)
class EstimatorConfig:
    target_cpu_percentile: float = 0.9
    lower_cpu_percentile: float = 0.5
    upper_cpu_percentile: float = 0.95
    target_memory_percentile: float = 0.9
    lower_memory_percentile: float = 0.5
    upper_memory_percentile: float = 0.95
    safety_margin: float = 0.15
    pod_min_cpu_milli: int = 25
    pod_min_memory_bytes: int = 250 * MIB
    confidence_interval_s: float = 24 * 3600.0
    # VPA assumes one sample a minute when it turns the sample count into history length;
    # a source with another cadence (node-agent 10 s, Bitbrains 5 min) sets its own.
    sample_interval_s: float = 60.0


@dataclass(frozen=True)
class Estimate:
    cpu_milli: int
    memory_bytes: int


@dataclass(frozen=True)
class ContainerEstimate:
    target: Estimate
    lower_bound: Estimate
    upper_bound: Estimate
    confidence: float


def _amount(x: float) -> int:
    """VPA's resourceAmountFromFloat: truncated, at most MaxResourceAmount, not below 0; NaN (0 x +Inf)
    is no amount (Go turns it into a negative integer, which the minimums then replace)."""
    if math.isnan(x) or x < 0:
        return 0
    return MAX_RESOURCE_AMOUNT if x > MAX_RESOURCE_AMOUNT else int(x)


def confidence(state: AggregateState, cfg: EstimatorConfig) -> float:
    """History length in confidence intervals: min(lifespan, samples x sample interval)."""
    if state.first_sample_ts is None or state.last_sample_ts is None:
        return 0.0
    lifespan = (state.last_sample_ts - state.first_sample_ts) / cfg.confidence_interval_s
    by_samples = state.total_samples * cfg.sample_interval_s / cfg.confidence_interval_s
    return min(lifespan, by_samples)


def _with_confidence(amount: int, conf: float, multiplier: float, exponent: float) -> int:
    """amount x (1 + multiplier / confidence)^exponent; confidence 0 makes the factor +Inf or 0."""
    factor = (1 + multiplier / conf) ** exponent if conf > 0 else (math.inf if exponent > 0 else 0.0)
    return _amount(amount * factor)


def _with_margin(amount: int, margin: float) -> int:
    """VPA's margin estimator: the amount plus its scaled margin, each truncated."""
    return _amount(amount + _amount(amount * margin))


def container_minimums(cfg: EstimatorConfig, containers_per_pod: int = 1) -> Estimate:
    """Each container's share of the per-pod minimums: no target goes below them."""
    n = max(containers_per_pod, 1)
    return Estimate(_amount(cfg.pod_min_cpu_milli / n), _amount(cfg.pod_min_memory_bytes / n))


def estimate(state: AggregateState, cfg: EstimatorConfig = EstimatorConfig(), containers_per_pod: int = 1) -> ContainerEstimate:
    conf = confidence(state, cfg)
    floor = container_minimums(cfg, containers_per_pod)
    min_cpu, min_mem = floor.cpu_milli, floor.memory_bytes

    cpu_ps = state.cpu.percentiles((cfg.target_cpu_percentile, cfg.lower_cpu_percentile, cfg.upper_cpu_percentile))
    mem_ps = state.memory.percentiles(
        (cfg.target_memory_percentile, cfg.lower_memory_percentile, cfg.upper_memory_percentile)
    )

    def at(i: int) -> tuple[int, int]:
        cpu = _amount(cpu_ps[i] * 1000)
        mem = _amount(mem_ps[i])
        return _with_margin(cpu, cfg.safety_margin), _with_margin(mem, cfg.safety_margin)

    t_cpu, t_mem = at(0)
    l_cpu, l_mem = at(1)
    u_cpu, u_mem = at(2)
    # VPA: upper x (1 + 1/confidence)^1, lower x (1 + 0.001/confidence)^-2.
    u_cpu = _with_confidence(u_cpu, conf, 1.0, 1.0)
    u_mem = _with_confidence(u_mem, conf, 1.0, 1.0)
    l_cpu = _with_confidence(l_cpu, conf, 0.001, -2.0)
    l_mem = _with_confidence(l_mem, conf, 0.001, -2.0)
    return ContainerEstimate(
        target=Estimate(max(t_cpu, min_cpu), max(t_mem, min_mem)),
        lower_bound=Estimate(max(l_cpu, min_cpu), max(l_mem, min_mem)),
        upper_bound=Estimate(max(u_cpu, min_cpu), max(u_mem, min_mem)),
        confidence=conf,
    )


def changed_beyond(old: Estimate | None, new: Estimate, threshold: float) -> bool:
    """True when either resource moved by more than `threshold` of its old value."""
    if old is None:
        return True
    for a, b in ((old.cpu_milli, new.cpu_milli), (old.memory_bytes, new.memory_bytes)):
        if a == 0:
            if b != 0:
                return True
        elif abs(b - a) > threshold * a:
            return True
    return False


def savings(current: Estimate | None, target: Estimate, replicas: int = 1) -> Estimate | None:
    """Requests freed (positive) or needed (negative) by moving from current to target."""
    if current is None:
        return None
    return Estimate((current.cpu_milli - target.cpu_milli) * replicas, (current.memory_bytes - target.memory_bytes) * replicas)

