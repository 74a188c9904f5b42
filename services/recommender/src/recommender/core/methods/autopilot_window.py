"""Autopilot's moving-window recommenders (Rzadca et al., EuroSys 2020, §3.2).

The usage signal, aggregated per 5-minute window (`window.py`), goes into a histogram whose
weights decay with age, w[τ] = 2^(-τ / half-life) (a VPA DecayingHistogram: the same decay
written as growing weights for new samples). Three statistics of that history:

- `max`: the peak over the last `max_windows` windows (S_max);
- `avg`: the decayed average (S_avg);
- `percentile`: the j-th percentile of the load-adjusted histogram (S_p^j): each bucket's
  weight times its value, so that the percentile is of usage mass, not of time, and short
  high spikes count for as much load as they carry.

CPU takes every sample (Autopilot's per-window CPU histograms, summed), memory one peak per
window. The result plus `margin` is the limit, which rises at once and falls slowly: a drop
takes effect at most as fast as halving every `fall_half_life_s` (0: at once). Request and
limit are the same value, as Autopilot sets limits that are also what the job reserves.
Defaults follow the paper's serving-job choices: CPU p95 with a 12 h half-life, memory p98
with a 48 h half-life.

`rise_headroom` (off by default) adds to the limit that many times the largest rise seen
between one window's peak and the next, decaying with `half_life_s`: a workload whose memory
climbs in steps (a serving pod filling its cache) gets room for one more step of the size it
has taken, where a relative margin gives a flat pod too much and a steep one too little. On the
GenAI pods it is what takes a short S_max window to a lower slack than any other setting at
VPA's over-rate (services/recommender/README.md).
"""

from __future__ import annotations

import math
import struct
from array import array
from collections.abc import Mapping
from dataclasses import dataclass, replace
from types import MappingProxyType
from typing import ClassVar

import numpy as np

from ..histogram import CPU_SCHEME, MEMORY_SCHEME, BucketScheme, DecayingHistogram
from .base import PerResource, ResourceModel, finite
from .buckets import mids, percentile_value
from .window import WINDOW_S, SlidingMax, Window

STATISTICS = ("percentile", "max", "avg")


@dataclass(frozen=True)
class WindowSettings:
    statistic: str = "percentile"
    percentile: float = 0.95
    half_life_s: float = 12 * 3600.0
    max_windows: int = 12  # S_max: windows looked back over
    margin: float = 0.0
    fall_half_life_s: float = 3600.0
    load_adjusted: bool = True
    peaks_only: bool = False  # True for memory: one value per window, its peak
    window_s: float = WINDOW_S
    rise_headroom: float = 0.0  # x the largest rise between consecutive window peaks (decayed)

    def __post_init__(self) -> None:
        if self.statistic not in STATISTICS:
            raise ValueError(f"statistic must be one of {', '.join(STATISTICS)}, not {self.statistic!r}")
        if not 0 < self.percentile <= 1:
            raise ValueError("percentile must be in (0, 1]")
        if (self.half_life_s <= 0 or self.window_s <= 0 or self.fall_half_life_s < 0 or self.margin < 0
                or self.rise_headroom < 0):
            raise ValueError("half-lives and the window must be positive; the margin, the rise headroom and the "
                             "fall half-life not negative")
        if not 1 <= self.max_windows <= 4096:
            raise ValueError("max_windows must be in 1..4096")


CPU_DEFAULTS = WindowSettings()
MEMORY_DEFAULTS = WindowSettings(percentile=0.98, half_life_s=48 * 3600.0, peaks_only=True)


class WindowState:
    __slots__ = ("hist", "last_peak", "limit", "limit_ts", "peaks", "rise", "rise_ts", "window")

    def __init__(self, hist: DecayingHistogram) -> None:
        self.hist = hist
        self.peaks = SlidingMax()  # the peak of the last max_windows closed windows
        self.window = Window()
        self.limit = 0.0
        self.limit_ts = -math.inf
        self.last_peak = math.nan  # the last closed window's peak (NaN: none yet)
        self.rise = 0.0  # the largest rise between consecutive window peaks, as of rise_ts
        self.rise_ts = 0.0

    def rise_at(self, t: float, half_life_s: float) -> float:
        return self.rise * 2.0 ** (-max(t - self.rise_ts, 0.0) / half_life_s) if self.rise > 0 else 0.0


class MovingWindow(ResourceModel[WindowState]):
    _TAIL = struct.Struct("<ddH")  # limit, limit time (NaN: none), closed peaks kept
    _RISE = struct.Struct("<ddd")  # after the peaks: last peak (NaN: none), rise, rise time

    def __init__(self, settings: WindowSettings, scheme: BucketScheme) -> None:
        self.s = settings
        self.scheme = scheme

    def new_state(self) -> WindowState:
        return WindowState(DecayingHistogram(self.scheme, self.s.half_life_s))

    def _close(self, st: WindowState, t: float) -> None:
        closed = st.window.roll(t, self.s.window_s)
        if closed is None:
            return
        peak, end = closed
        if self.s.peaks_only:
            st.hist.add_sample(peak, 1.0, end)
        st.peaks.push(peak, self.s.max_windows)
        rise = peak - st.last_peak  # NaN for the first window: no rise
        if rise > st.rise_at(end, self.s.half_life_s):
            st.rise, st.rise_ts = rise, end
        st.last_peak = peak

    def add(self, st: WindowState, t: float, value: float) -> None:
        self._close(st, t)
        st.window.put(t, value, self.s.window_s)
        if not self.s.peaks_only:
            st.hist.add_sample(value, 1.0, t)

    def statistic(self, st: WindowState) -> float:
        """S_max, S_avg or S_p^j of the history so far (0 with none)."""
        s = self.s
        if s.statistic == "max":
            open_peak = st.window.peak if st.window.end != -math.inf else 0.0
            return max(st.peaks.peak(), open_peak)
        h = st.hist
        if not h._w:
            return 0.0
        w = np.frombuffer(h._w, dtype=np.float64)
        m = mids(self.scheme)[h._lo : h._lo + w.size]
        if s.statistic == "avg":
            total = float(w.sum())
            return float(w @ m) / total if total > 0 else 0.0
        return percentile_value(self.scheme, h._lo, w * m if s.load_adjusted else w, s.percentile)

    def value(self, st: WindowState, t: float) -> tuple[float, float]:
        self._close(st, t)
        raw = self.statistic(st) * (1 + self.s.margin)
        if self.s.rise_headroom:
            raw += self.s.rise_headroom * st.rise_at(t, self.s.half_life_s)
        limit = raw
        if raw < st.limit and self.s.fall_half_life_s > 0:
            # rise at once, fall slowly: the old limit decays towards the new value
            held = st.limit * 2.0 ** (-max(t - st.limit_ts, 0.0) / self.s.fall_half_life_s)
            limit = max(raw, held)
        st.limit, st.limit_ts = limit, t
        return limit, limit

    def explain(self, st: WindowState) -> dict:
        """The statistic as it stands, the margin and rise headroom over it, and the limit last
        given (above statistic x (1 + margin) + headroom while a drop is still falling slowly)."""
        s = self.s
        out: dict = {"statistic": s.statistic, "margin": s.margin, "fall_half_life_s": s.fall_half_life_s}
        if s.statistic == "max":
            out["max_windows"] = s.max_windows
            out["window_s"] = s.window_s
        else:
            out["half_life_s"] = s.half_life_s
            if s.statistic == "percentile":
                out["percentile"] = s.percentile
        out["statistic_value"] = finite(self.statistic(st))
        if s.rise_headroom:
            out["rise_headroom"] = s.rise_headroom
            out["largest_rise"] = finite(st.rise_at(st.limit_ts, s.half_life_s)) if st.limit_ts > -math.inf else None
        out["limit"] = finite(st.limit) if st.limit_ts > -math.inf else None
        return out

    def save(self, st: WindowState) -> bytes:
        ts = math.nan if st.limit_ts == -math.inf else st.limit_ts
        peaks = st.peaks.expanded(self.s.max_windows)
        return (st.hist.save() + st.window.save() + self._TAIL.pack(st.limit, ts, len(peaks)) + peaks.tobytes()
                + self._RISE.pack(st.last_peak, st.rise, st.rise_ts))

    def load(self, data: bytes) -> tuple[WindowState, int]:
        hist, off = DecayingHistogram.load(data, self.scheme, self.s.half_life_s)
        st = WindowState(hist)
        st.window, off = Window.load(data, off)
        limit, ts, n = self._TAIL.unpack_from(data, off)
        off += self._TAIL.size
        st.limit, st.limit_ts = limit, (-math.inf if math.isnan(ts) else ts)
        # written with a longer max_windows setting: only the newest windows still count
        st.peaks = SlidingMax.of(array("d", data[off : off + 8 * n]), self.s.max_windows)
        off += 8 * n
        if len(data) >= off + self._RISE.size:  # checkpoints written before the rise headroom end here
            st.last_peak, st.rise, st.rise_ts = self._RISE.unpack_from(data, off)
            off += self._RISE.size
        return st, off


class AutopilotWindow(PerResource):
    """Autopilot's moving-window recommender for CPU and memory."""

    name = "autopilot-window"

    def __init__(self, cpu: WindowSettings = CPU_DEFAULTS, memory: WindowSettings = MEMORY_DEFAULTS) -> None:
        super().__init__(MovingWindow(cpu, CPU_SCHEME), MovingWindow(memory, MEMORY_SCHEME))


class AutopilotWindowRise(AutopilotWindow):
    """The moving window under a preset, for both resources (each keeps its half-life): S_max
    over the last hour (12 windows) plus 5 % and once the largest rise between window peaks
    seen (`rise_headroom`). For memory that climbs in steps: the evaluation's
    `autopilot-window-rise` (GenAI memory: 0.67 x VPA's slack at its over-rate)."""

    name = "autopilot-window-rise"
    PRESET: ClassVar[Mapping[str, object]] = MappingProxyType(
        {"statistic": "max", "max_windows": 12, "margin": 0.05, "rise_headroom": 1.0})

    def __init__(self, **changes) -> None:
        knobs = {**self.PRESET, **changes}
        super().__init__(replace(CPU_DEFAULTS, **knobs), replace(MEMORY_DEFAULTS, **knobs))
