"""Predicted peak of a node's HP usage: the `predict` batch calculation policy.

    predicted HP = max(N-sigma of the node's HP usage, sum of the HP pods' own peaks)

as "Take it to the limit" (Bashir et al., EuroSys 2021) adopts: the max of an N-sigma predictor
(mean + N x standard deviation of the machine's usage) and a per-task percentile sum.

- Per-pod sum: Koordinator's prod peak predictor (koordlet prediction/peak_predictor.go), which
  the node agent runs and reports in every NodeMetric as `prod_peak`: per prod pod p95 CPU /
  p98 memory + 10 %, and its request while younger than the 24 h cold start. The other HP pods
  (mid) have no prediction and count by usage, or by request without a metric. A NodeMetric
  without `prod_peak` has no per-pod part: the HP requests stand in for it.
- N-sigma: `UsageMoments`, the node's HP usage (its HP pods' usage as the NodeMetric reports
  it) folded into exponentially decayed mean and variance, CPU with a 12 h half-life and memory
  with 24 h (Koordinator's predictor half-lives), N = 5 (the paper's artifact configuration).
  Until `min_samples` reports (24, as the paper's min_num_samples) the HP requests stand in.

Fail safe: whatever is unknown counts at the HP pods' requests, never less than what the
NodeMetric shows in use. Every figure is in the plan's inputs.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from .snapshot import MetricView, NodeSnapshot


@dataclass(frozen=True)
class PeakConfig:
    n_sigma: float = 5.0
    cpu_half_life_s: float = 12 * 3600.0
    memory_half_life_s: float = 24 * 3600.0
    min_samples: int = 24


DEFAULT_PEAK = PeakConfig()


def hp_usage(metric: MetricView) -> tuple[int, int]:
    """The HP pods' usage in a NodeMetric, each pod by its own priority."""
    c = m = 0
    for uc, um, hp in (metric.pods or {}).values():
        if hp:
            c += uc
            m += um
    return c, m


class UsageMoments:
    """Decayed count, sum and sum of squares of a node's HP usage, per resource.

    At each report every earlier weight is multiplied by 2^(-dt / half-life) and the new value
    enters with weight 1, so mean and variance follow the recent usage at the half-life's pace.
    """

    __slots__ = ("cfg", "last_ms", "samples", "sums")

    def __init__(self, cfg: PeakConfig = DEFAULT_PEAK) -> None:
        self.cfg = cfg
        self.last_ms: int | None = None
        self.samples = 0
        self.sums = [[0.0, 0.0, 0.0], [0.0, 0.0, 0.0]]  # per resource: weight, sum, sum of squares

    def observe(self, t_ms: int, cpu: int, memory: int) -> bool:
        """Fold one report in; False for a report not newer than the last."""
        if self.last_ms is not None and t_ms <= self.last_ms:
            return False
        dt = 0.0 if self.last_ms is None else (t_ms - self.last_ms) / 1000.0
        for s, x, hl in ((self.sums[0], cpu, self.cfg.cpu_half_life_s), (self.sums[1], memory, self.cfg.memory_half_life_s)):
            f = 2.0 ** (-dt / hl)
            s[0] = s[0] * f + 1.0
            s[1] = s[1] * f + x
            s[2] = s[2] * f + float(x) * x
        self.last_ms = t_ms
        self.samples += 1
        return True

    def mean_std(self) -> tuple[tuple[float, float], tuple[float, float]] | None:
        """((cpu mean, std), (memory mean, std)), or None before min_samples reports."""
        if self.samples < self.cfg.min_samples:
            return None
        out = []
        for w, s1, s2 in self.sums:
            mean = s1 / w
            var = s2 / w - mean * mean
            # a variance within rounding of E[x^2] is none: constant usage has no spread
            out.append((mean, math.sqrt(var) if var > 1e-12 * (s2 / w) else 0.0))
        return out[0], out[1]

    def n_sigma(self) -> tuple[int, int] | None:
        """mean + N x std per resource, rounded up; None before min_samples reports."""
        ms = self.mean_std()
        if ms is None:
            return None
        n = self.cfg.n_sigma
        # rounded to a millionth first, so that float noise never adds a whole unit
        return math.ceil(round(ms[0][0] + n * ms[0][1], 6)), math.ceil(round(ms[1][0] + n * ms[1][1], 6))


@dataclass(frozen=True, slots=True)
class PredictedPeak:
    cpu: int
    memory: int
    n_sigma: tuple[int, int] | None  # None: too little history (requests stood in)
    per_pod: tuple[int, int] | None  # None: no prod_peak in the NodeMetric (requests stood in)

    def inputs(self) -> dict:
        return {"podHPPredictedPeak": [self.cpu, self.memory], "nSigmaPeak": self.n_sigma, "perPodPeakSum": self.per_pod}


def predict(snapshot: NodeSnapshot, moments: UsageMoments | None) -> PredictedPeak:
    """The predicted HP peak of a node with a fresh metric (the batch rule checked staleness)."""
    metric = snapshot.metric
    t = snapshot.totals()
    req = t.hp_request
    per_pod = None
    if metric is not None and metric.prod_peak is not None:
        usage = metric.pods or {}
        mid_c = mid_m = 0
        for p in snapshot.pods:
            if p.active and p.hp and not p.prod:
                u = usage.get(p.key)
                mid_c += p.cpu_request if u is None else u[0]
                mid_m += p.memory_request if u is None else u[1]
        per_pod = (metric.prod_peak[0] + mid_c, metric.prod_peak[1] + mid_m)
    sigma = moments.n_sigma() if moments is not None else None
    parts = [x for x in (sigma, per_pod) if x is not None]
    if len(parts) < 2:
        parts.append(req)  # an unknown part counts at the requests
    cpu = max(p[0] for p in parts)
    mem = max(p[1] for p in parts)
    # never below what is in use now (a burst past every prediction is still there)
    cpu = max(cpu, t.hp_used[0])
    mem = max(mem, t.hp_used[1])
    return PredictedPeak(cpu, mem, sigma, per_pod)
