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
from array import array

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


class SlidingMax:
    """The peak of the last `size` values pushed (Autopilot's S_max over window peaks).

    Only the values that can still be that peak are kept: a value evicts every older one not
    above it, and the oldest leaves once `size` newer values came. The kept values fall from
    oldest to newest, so the peak is the oldest one kept; a day of 5-minute peaks (288) keeps a
    handful rather than all of them. `expanded` writes them out as the `size` values they stand
    for (each window's value is the peak of it and the windows after it), which a checkpoint
    stores and `of` reads back with the same answers.
    """

    __slots__ = ("count", "seqs", "values")

    def __init__(self) -> None:
        self.values = array("d")  # falling, oldest first
        self.seqs = array("q")  # the push number of each value kept
        self.count = 0  # values pushed so far

    def push(self, value: float, size: int) -> None:
        values, seqs = self.values, self.seqs
        while values and values[-1] <= value:
            values.pop()
            seqs.pop()
        values.append(value)
        seqs.append(self.count)
        self.count += 1
        while seqs[0] < self.count - size:
            del seqs[0]
            del values[0]

    def peak(self, default: float = 0.0) -> float:
        return self.values[0] if self.values else default

    def expanded(self, size: int) -> array:
        """The last min(count, size) pushes as values whose every suffix has the same peak."""
        out = array("d")
        i = 0
        for seq in range(self.count - min(self.count, size), self.count):
            while self.seqs[i] < seq:
                i += 1
            out.append(self.values[i])
        return out

    @classmethod
    def of(cls, values, size: int) -> SlidingMax:
        """The newest `size` of `values` (oldest first) pushed in order."""
        out = cls()
        for v in values[max(len(values) - size, 0) :]:
            out.push(v, size)
        return out
