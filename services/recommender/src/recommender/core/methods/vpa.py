"""VPA's recommender behind the method interface: the AggregateState the service has always
kept (decaying CPU histogram, daily memory peaks, OOM bumps) and VPA's estimator chain.

The request is VPA's target. VPA sets no limit of its own: it scales the pod's limit with the
request, so for a container whose limit equals its request the limit is the target too.
"""

from __future__ import annotations

from ..aggregate import AggregateState, AggregationConfig
from ..estimator import EstimatorConfig, estimate
from .base import Amounts, Recommendation, Recommender, Sample


class VPA(Recommender[AggregateState]):
    name = "vpa"

    def __init__(self, aggregation: AggregationConfig | None = None, estimator: EstimatorConfig | None = None) -> None:
        self.aggregation = aggregation or AggregationConfig()
        self.estimator = estimator or EstimatorConfig()

    def new_state(self) -> AggregateState:
        return AggregateState(self.aggregation)

    def add(self, state: AggregateState, sample: Sample) -> None:
        if sample.cpu_cores is not None:
            state.add_cpu_sample(sample.pod, sample.t, sample.cpu_cores, sample.cpu_request_cores)
        if sample.memory_bytes is not None:
            state.add_memory_sample(sample.pod, sample.t, sample.memory_bytes, sample.memory_request_bytes)

    def recommend(self, state: AggregateState, t: float) -> Recommendation:
        target = estimate(state, self.estimator).target
        amounts = Amounts(target.cpu_milli / 1000.0, float(target.memory_bytes))
        return Recommendation(amounts, amounts)

    def explain(self, state: AggregateState) -> dict:
        """The percentile of each decaying histogram the target is (CPU in cores, memory in bytes:
        the daily peaks, OOM bumps included), the margin over it, and the half-lives; the
        target is each value plus the margin, truncated, and not below the minimums."""
        e, a = self.estimator, self.aggregation
        (cpu,) = state.cpu.percentiles((e.target_cpu_percentile,))
        (memory,) = state.memory.percentiles((e.target_memory_percentile,))
        return {"target_cpu_percentile": e.target_cpu_percentile, "cpu_at_percentile": round(cpu, 6),
                "target_memory_percentile": e.target_memory_percentile, "memory_at_percentile": int(memory),
                "safety_margin": e.safety_margin, "cpu_half_life_s": a.cpu_half_life_s,
                "memory_half_life_s": a.memory_half_life_s}  # fmt: skip

    def save(self, state: AggregateState) -> bytes:
        return state.save()

    def load(self, data: bytes) -> AggregateState:
        return AggregateState.load(data, self.aggregation)
