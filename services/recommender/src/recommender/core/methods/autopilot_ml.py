"""Autopilot's ML recommender (Rzadca et al., EuroSys 2020, §3.3): an ensemble of models, each
a (decay, margin) pair, choosing among them by their past cost.

Each model keeps the usage history decayed at its own rate (here a half-life) as a histogram
over VPA's buckets, normalised to a distribution p. For a limit L at the end of bucket k:

- overrun  o(L) = share of the history above L;
- underrun u(L) = Σ_{j ≤ k} p_j (L - mid_j) / L, the history's slack under L as a share of L
  (Autopilot's slack: one set of weights fits a 0.05-core container and a 40-core one alike),
  or, with `underrun_unit` set, Σ_{j ≤ k} p_j (L - mid_j) / unit: the slack in resource units
  (cores, bytes) as the paper counts it. In units, a large container pays more for each share
  of slack than a small one, so for the same weights it takes a tighter limit and more
  overruns, and a small one a looser limit: over a fleet this spends the overruns where they
  save the most resource, which is what the pooled figures (Σ slack over Σ request, share of
  all intervals over) reward (`autopilot-ml-units`, `README.md`);

and picks L' = argmin w_o·o(L) + w_u·u(L) + w_ΔL·[L ≠ its previous L'], then L = L' x (1 + M).

The ensemble scores every model by what its limits would have cost on the usage that came
after them: at each decision c_m ← d·c_m + (1 - d)·(w_o·over-rate + w_u·slack + w_ΔL·[L_m
changed]), over the samples since the previous decision. It takes the model minimising
c_m + w_Δm·[m ≠ previous model] + w_ΔL·[L_m ≠ previous limit]. A decision is taken each time a
recommendation is asked for.

Defaults: models = half-lives {30 min, 2 h, 8 h, 48 h} x margins {0, 10 %}; w_o = 0.5, d = 0.75
(a public re-implementation's values); w_u = 0.07 for CPU and 0.03 for memory, w_ΔL = w_Δm =
0.002. The paper does not publish its weights; with costs as shares (over-rate, slack) rather
than sample counts and resource units, a change must cost a few tenths of a percent of
over-rate, not the re-implementation's 0.1, or a model never moves its limit. w_u is the knob
the evaluation sweeps (`README.md`): it sets where on the slack-vs-over-rate curve the
recommender sits; the defaults are the sweep points that meet the evaluation's targets (CPU)
and keep memory's over-rate near VPA's. CPU takes every sample, memory one peak per 5-minute window (`window.py`).
Request and limit are the same value.
"""

from __future__ import annotations

import math
import struct
from dataclasses import dataclass, replace

import numpy as np

from ..histogram import CPU_SCHEME, MEMORY_SCHEME, BucketScheme
from .base import PerResource, ResourceModel, finite
from .buckets import ends, mids
from .window import WINDOW_S, Window

# Weights grow as 2^(age / half-life) from a shared reference; past this exponent (for the
# shortest half-life) the histogram is rescaled to a new reference, keeping float32 exact enough.
MAX_EXPONENT = 24.0
TINY = 1e-7  # relative weight below which a bucket counts as empty after a rescale


@dataclass(frozen=True)
class MLSettings:
    half_lives_s: tuple[float, ...] = (1800.0, 2 * 3600.0, 8 * 3600.0, 48 * 3600.0)
    margins: tuple[float, ...] = (0.0, 0.1)
    w_over: float = 0.5
    w_under: float = 0.07
    w_limit_change: float = 0.002
    w_model_change: float = 0.002
    cost_decay: float = 0.75
    peaks_only: bool = False
    window_s: float = WINDOW_S
    underrun_unit: float = 0.0  # 0: underrun as a share of the limit; else in resource units of this size

    def __post_init__(self) -> None:
        if not self.half_lives_s or not self.margins or len(self.half_lives_s) * len(self.margins) > 64:
            raise ValueError("the ensemble needs 1..64 models (half-lives x margins)")
        if any(h <= 0 for h in self.half_lives_s) or any(m < 0 for m in self.margins):
            raise ValueError("half-lives must be positive and margins not negative")
        if min(self.w_over, self.w_under, self.w_limit_change, self.w_model_change) < 0:
            raise ValueError("cost weights must not be negative")
        if not 0 <= self.cost_decay < 1:
            raise ValueError("cost_decay must be in [0, 1)")
        if not (math.isfinite(self.underrun_unit) and self.underrun_unit >= 0):
            raise ValueError("underrun_unit must be 0 (a share of the limit) or a positive amount")

    @property
    def models(self) -> list[tuple[int, float]]:
        """(histogram row, margin) of every model, half-life major."""
        return [(i, m) for i in range(len(self.half_lives_s)) for m in self.margins]


CPU_DEFAULTS = MLSettings()
MEMORY_DEFAULTS = MLSettings(w_under=0.03, peaks_only=True)
GIB = 1024.0**3
# `autopilot-ml-units`: underrun in cores and GiB. The weights are the evaluation's sweep points
# with an over-rate below VPA's on Bitbrains (CPU 1.30 % against 1.84 %, memory 0.35 % or less).
CPU_UNITS_DEFAULTS = replace(CPU_DEFAULTS, underrun_unit=1.0, w_under=0.05)
MEMORY_UNITS_DEFAULTS = replace(MEMORY_DEFAULTS, underrun_unit=GIB, w_under=0.002)


def _row(i: int, doc: str) -> property:
    def get(self: MLState) -> np.ndarray:
        return self.per_model[i]

    def put(self: MLState, value: np.ndarray) -> None:
        self.per_model[i] = value

    return property(get, put, doc=doc)


class MLState:
    # One array for the per-model numbers rather than five: each numpy array costs ~100 bytes
    # of header, which at a few hundred bytes of data per container is what counts.
    __slots__ = ("hist", "last", "lo", "model", "n", "per_model", "ref", "window")

    def __init__(self, rows: int, models: int) -> None:
        self.hist = np.zeros((rows, 0), dtype=np.float32)  # decayed weights, buckets lo..lo+W-1
        self.lo = 0
        self.ref = math.nan  # reference time of the weights
        self.window = Window()
        self.per_model = np.zeros((5, models))
        self.per_model[0] = -1
        self.n = 0  # samples since the last decision
        self.model = -1  # the model chosen last
        self.last = 0.0  # the limit recommended last

    k = _row(0, "each model's chosen bucket (-1: none yet)")
    limits = _row(1, "each model's limit in force")
    cost = _row(2, "decayed cost of each model's past limits")
    over = _row(3, "since the last decision: samples above each model's limit")
    under = _row(4, "... and the sum of (limit - sample) / limit over those below")


class EnsembleModel(ResourceModel[MLState]):
    _HEAD = struct.Struct("<dHBHBbdI")  # ref, lo, rows, width, models, chosen model, last limit, n

    def __init__(self, settings: MLSettings, scheme: BucketScheme) -> None:
        self.s = settings
        self.scheme = scheme
        self._rows = np.array([i for i, _ in settings.models])
        self._margins = np.array([m for _, m in settings.models])
        self._inv_half_lives = 1.0 / np.array(settings.half_lives_s)

    def new_state(self) -> MLState:
        return MLState(len(self.s.half_lives_s), len(self._rows))

    # ------------------------------------------------------------------ history

    def _rescale(self, st: MLState, t: float) -> None:
        if st.hist.shape[1]:
            st.hist *= np.exp2(-(t - st.ref) * self._inv_half_lives).astype(np.float32)[:, None]
            st.hist[st.hist < TINY * st.hist.max(axis=1, keepdims=True)] = 0.0
            used = np.flatnonzero(st.hist.any(axis=0))
            if used.size == 0:
                st.hist, st.lo = st.hist[:, :0], 0
            else:
                st.lo += int(used[0])
                st.hist = np.ascontiguousarray(st.hist[:, used[0] : used[-1] + 1])
        st.ref = t

    def _observe(self, st: MLState, x: float, t: float) -> None:
        b = self.scheme.find_bucket(x)
        if math.isnan(st.ref) or (t - st.ref) * self._inv_half_lives[0] > MAX_EXPONENT:
            self._rescale(st, t)
        width = st.hist.shape[1]
        if width == 0:
            st.hist, st.lo = np.zeros((st.hist.shape[0], 1), dtype=np.float32), b
        elif b < st.lo:
            st.hist = np.concatenate((np.zeros((st.hist.shape[0], st.lo - b), dtype=np.float32), st.hist), axis=1)
            st.lo = b
        elif b >= st.lo + width:
            st.hist = np.concatenate((st.hist, np.zeros((st.hist.shape[0], b - st.lo - width + 1), dtype=np.float32)), axis=1)
        st.hist[:, b - st.lo] += np.exp2((t - st.ref) * self._inv_half_lives)
        # what each model's limit in force makes of this sample
        lim = st.limits
        st.over += x > lim
        if self.s.underrun_unit:
            st.under += np.maximum(lim - x, 0.0) / self.s.underrun_unit
        else:
            st.under += np.divide(np.maximum(lim - x, 0.0), lim, out=np.zeros_like(lim), where=lim > 0)
        st.n += 1

    def _close(self, st: MLState, t: float) -> None:
        closed = st.window.roll(t, self.s.window_s)
        if closed is not None and self.s.peaks_only:
            self._observe(st, closed[0], closed[1])

    def add(self, st: MLState, t: float, value: float) -> None:
        self._close(st, t)
        st.window.put(t, value, self.s.window_s)
        if not self.s.peaks_only:
            self._observe(st, value, t)

    # ------------------------------------------------------------------ decisions

    def costs(self, st: MLState) -> np.ndarray:
        """Per history row, w_o·o(L) + w_u·u(L) for every candidate L (bucket ends lo..lo+W-1)."""
        h = st.hist.astype(np.float64)
        total = h.sum(axis=1, keepdims=True)
        p = np.divide(h, total, out=np.zeros_like(h), where=total > 0)
        width = h.shape[1]
        end = ends(self.scheme)[st.lo : st.lo + width]
        mid = mids(self.scheme)[st.lo : st.lo + width]
        cum = np.cumsum(p, axis=1)
        cmass = np.cumsum(p * mid, axis=1)
        over = np.clip(1.0 - cum, 0.0, None)
        if self.s.underrun_unit:
            under = np.clip(cum * end - cmass, 0.0, None) / self.s.underrun_unit
        else:
            under = np.clip(cum - cmass / end, 0.0, None)  # (cum x L - cmass) / L
        return self.s.w_over * over + self.s.w_under * under

    def decide(self, st: MLState) -> float:
        s = self.s
        if st.hist.shape[1] == 0:
            return 0.0
        rows = self.costs(st)
        # 1. score the limits in force since the last decision on what came after them
        if st.n and st.model >= 0:
            realised = s.w_over * st.over / st.n + s.w_under * st.under / st.n
            st.cost = s.cost_decay * st.cost + (1 - s.cost_decay) * realised
        st.over[:] = 0.0
        st.under[:] = 0.0
        st.n = 0
        # 2. every model picks its limit, paying w_ΔL to move
        end = ends(self.scheme)[st.lo : st.lo + rows.shape[1]]
        best = rows.argmin(axis=1)
        old_limits = st.limits.copy()
        for m, row in enumerate(self._rows):
            cost = rows[row]
            k = int(best[row])
            kp = int(st.k[m]) - st.lo
            if kp != k and 0 <= kp < cost.size and cost[kp] <= cost[k] + s.w_limit_change:
                k = kp
            st.k[m] = k + st.lo
            st.limits[m] = end[k] * (1 + self._margins[m])
        if st.model >= 0:
            st.cost += (1 - s.cost_decay) * s.w_limit_change * (st.limits != old_limits)
            # 3. the ensemble: least decayed cost, plus the cost of switching model or limit
            score = st.cost + s.w_model_change * (np.arange(st.cost.size) != st.model)
            score += s.w_limit_change * (st.limits != st.last)
            st.model = int(score.argmin())
        else:
            st.model = int(st.cost.argmin())
        st.last = float(st.limits[st.model])
        return st.last

    def value(self, st: MLState, t: float) -> tuple[float, float]:
        self._close(st, t)
        limit = self.decide(st)
        return limit, limit

    def explain(self, st: MLState) -> dict:
        """Every model's limit in force and decayed cost, the one the ensemble chose, and the
        weights it chose by."""
        s = self.s
        models = [
            {"half_life_s": s.half_lives_s[row], "margin": margin,
             "limit": finite(st.limits[m]) if st.k[m] >= 0 else None, "decayed_cost": finite(st.cost[m])}
            for m, (row, margin) in enumerate(s.models)
        ]  # fmt: skip
        return {
            "chosen_model": st.model if st.model >= 0 else None,
            "limit": finite(st.last) if st.model >= 0 else None,
            "models": models,
            "weights": {"w_over": s.w_over, "w_under": s.w_under, "w_limit_change": s.w_limit_change,
                        "w_model_change": s.w_model_change, "cost_decay": s.cost_decay},
            "underrun": "share of the limit" if not s.underrun_unit else f"in units of {s.underrun_unit:g}",
        }  # fmt: skip

    # ------------------------------------------------------------------ checkpoint

    def save(self, st: MLState) -> bytes:
        rows, width = st.hist.shape
        head = self._HEAD.pack(st.ref, st.lo, rows, width, st.k.size, st.model, st.last, st.n)
        return b"".join(
            (
                head,
                st.window.save(),
                st.hist.astype("<f4").tobytes(),
                st.k.astype("<i2").tobytes(),
                st.limits.astype("<f8").tobytes(),
                st.cost.astype("<f8").tobytes(),
                st.over.astype("<f4").tobytes(),
                st.under.astype("<f8").tobytes(),
            )
        )

    def load(self, data: bytes) -> tuple[MLState, int]:
        ref, lo, rows, width, models, model, last, n = self._HEAD.unpack_from(data, 0)
        if rows != len(self.s.half_lives_s) or models != len(self._rows):
            raise ValueError("checkpoint was written by an ensemble of another shape")
        st = MLState(rows, models)
        st.ref, st.lo, st.model, st.last, st.n = ref, lo, model, last, n
        st.window, off = Window.load(data, self._HEAD.size)

        def take(dtype: str, count: int) -> np.ndarray:
            nonlocal off
            a = np.frombuffer(data, dtype=dtype, count=count, offset=off).copy()
            off += a.nbytes
            return a

        st.hist = take("<f4", rows * width).reshape(rows, width).astype(np.float32)
        st.k = take("<i2", models).astype(np.float64)
        st.limits = take("<f8", models).astype(np.float64)
        st.cost = take("<f8", models).astype(np.float64)
        st.over = take("<f4", models).astype(np.float64)
        st.under = take("<f8", models).astype(np.float64)
        return st, off


class AutopilotML(PerResource):
    """Autopilot's ML (ensemble) recommender for CPU and memory."""

    name = "autopilot-ml"

    def __init__(self, cpu: MLSettings = CPU_DEFAULTS, memory: MLSettings = MEMORY_DEFAULTS) -> None:
        super().__init__(EnsembleModel(cpu, CPU_SCHEME), EnsembleModel(memory, MEMORY_SCHEME))


class AutopilotMLUnits(AutopilotML):
    """The ensemble with underrun counted in resource units, as the paper counts it (cores, GiB;
    `CPU_UNITS_DEFAULTS`, `MEMORY_UNITS_DEFAULTS`). `w_under_scale` multiplies both underrun
    weights: the evaluation's knob."""

    name = "autopilot-ml-units"

    def __init__(self, w_under_scale: float = 1.0) -> None:
        super().__init__(replace(CPU_UNITS_DEFAULTS, w_under=CPU_UNITS_DEFAULTS.w_under * w_under_scale),
                         replace(MEMORY_UNITS_DEFAULTS, w_under=MEMORY_UNITS_DEFAULTS.w_under * w_under_scale))
