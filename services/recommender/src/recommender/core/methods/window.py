"""Autopilot's 5-minute aggregation of a usage signal (Rzadca et al., EuroSys 2020, §3.1).

Autopilot reduces each task's raw usage to one aggregate per 5-minute window: for CPU a
histogram of the window's samples, for memory the window's peak. `Window` keeps the open
window of one container; a window is closed by the first sample or read at or after its end.
The window peak is taken over all pods of the workload container (Autopilot sums the tasks'
histograms into the job's; for the memory peak, the pods' largest is the conservative choice).
"""

from __future__ import annotations

import math
import struct

WINDOW_S = 300.0


class Window:
    __slots__ = ("end", "peak")

    _FMT = struct.Struct("<dd")

    def __init__(self) -> None:
        self.end = -math.inf  # end of the open window; -inf before the first sample
        self.peak = 0.0

    def roll(self, t: float, window_s: float) -> tuple[float, float] | None:
        """Close the open window if t is at or past its end: its (peak, end), else None."""
        if t < self.end or self.end == -math.inf:
            return None
        closed = (self.peak, self.end)
        self.end = -math.inf
        self.peak = 0.0
        return closed

    def put(self, t: float, value: float, window_s: float) -> None:
        """Count a sample in the open window (opening the one t falls in when none is open)."""
        if self.end == -math.inf:
            self.end = (math.floor(t / window_s) + 1) * window_s
            self.peak = value
        elif value > self.peak:
            self.peak = value

    def save(self) -> bytes:
        return self._FMT.pack(self.end, self.peak)

    @classmethod
    def load(cls, data: bytes, off: int) -> tuple[Window, int]:
        w = cls()
        w.end, w.peak = cls._FMT.unpack_from(data, off)
        return w, off + cls._FMT.size
