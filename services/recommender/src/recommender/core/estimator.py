"""VPA's estimator chain: percentile -> x(1 + margin) -> confidence multiplier (bounds only)
-> max(., per-pod minimum / containers per pod) (logic/estimator.go, logic/recommender.go).

Amounts follow VPA's ResourceAmount: integer milli-cores and bytes, truncated after every step.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from .aggregate import MIB, AggregateState
from .histogram import CPU_SCHEME, MEMORY_SCHEME

# Upper bound when there is no history at all (VPA: +Inf capped at the max resource amount).
MAX_CPU_MILLI = int(CPU_SCHEME.max_value * 1000)
MAX_MEMORY_BYTES = int(MEMORY_SCHEME.max_value)


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


def _amount(x: float, cap: int) -> int:
    if math.isnan(x) or x < 0:
        return 0
    return cap if x > cap else int(x)


def confidence(state: AggregateState, cfg: EstimatorConfig) -> float:
    """History length in confidence intervals: min(lifespan, samples x sample interval)."""
    if state.first_sample_ts is None or state.last_sample_ts is None:
        return 0.0
    lifespan = (state.last_sample_ts - state.first_sample_ts) / cfg.confidence_interval_s
    by_samples = state.total_samples * cfg.sample_interval_s / cfg.confidence_interval_s
    return min(lifespan, by_samples)


def _with_confidence(amount: int, conf: float, multiplier: float, exponent: float, cap: int) -> int:
    if conf <= 0:
        return cap if exponent > 0 else 0
    return _amount(amount * (1 + multiplier / conf) ** exponent, cap)


def estimate(state: AggregateState, cfg: EstimatorConfig = EstimatorConfig(), containers_per_pod: int = 1) -> ContainerEstimate:
    conf = confidence(state, cfg)
    margin = 1 + cfg.safety_margin
    n = max(containers_per_pod, 1)
    min_cpu = _amount(cfg.pod_min_cpu_milli / n, MAX_CPU_MILLI)
    min_mem = _amount(cfg.pod_min_memory_bytes / n, MAX_MEMORY_BYTES)

    cpu_ps = state.cpu.percentiles((cfg.target_cpu_percentile, cfg.lower_cpu_percentile, cfg.upper_cpu_percentile))
    mem_ps = state.memory.percentiles(
        (cfg.target_memory_percentile, cfg.lower_memory_percentile, cfg.upper_memory_percentile)
    )

    def at(i: int) -> tuple[int, int]:
        cpu = _amount(cpu_ps[i] * 1000, MAX_CPU_MILLI)
        mem = _amount(mem_ps[i], MAX_MEMORY_BYTES)
        return _amount(cpu * margin, MAX_CPU_MILLI), _amount(mem * margin, MAX_MEMORY_BYTES)

    t_cpu, t_mem = at(0)
    l_cpu, l_mem = at(1)
    u_cpu, u_mem = at(2)
    # VPA: upper x (1 + 1/confidence)^1, lower x (1 + 0.001/confidence)^-2.
    u_cpu = _with_confidence(u_cpu, conf, 1.0, 1.0, MAX_CPU_MILLI)
    u_mem = _with_confidence(u_mem, conf, 1.0, 1.0, MAX_MEMORY_BYTES)
    l_cpu = _with_confidence(l_cpu, conf, 0.001, -2.0, MAX_CPU_MILLI)
    l_mem = _with_confidence(l_mem, conf, 0.001, -2.0, MAX_MEMORY_BYTES)
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

