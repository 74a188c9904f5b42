"""Usage profile per workload container: p50/p90/p95/p99/max over 1 h, 1 d and 7 d, and a
24-hour diurnal shape.

Each window is a ring of closed slots (12 x 5 min, 24 x 1 h, 7 x 1 d) plus the open slot.
A closed slot keeps only its sample count, its p50/p90/p95/p99 as bucket indices of the VPA
bucket scheme and its exact max (12 bytes), which is what bounds the state per container.
A window's percentile pools the slots, each slot standing for its samples as masses
0.5/0.4/0.05/0.04/0.01 at its p50/p90/p95/p99/max; this is exact when the slots share one
distribution and leans high (never low by more than one slot quantile) otherwise. The open
slot contributes its exact bucket counts. Values are cores (CPU) and bytes (memory).
"""

from __future__ import annotations

import math
import struct
from collections import deque
from dataclasses import dataclass

import numpy as np

from .histogram import CPU_SCHEME, MEMORY_SCHEME, BucketScheme

QUANTILES = (0.5, 0.9, 0.95, 0.99)
_MASSES = np.array([0.5, 0.4, 0.05, 0.04, 0.01])


@dataclass(frozen=True)
class Level:
    name: str
    slot_s: int
    slots: int

    @property
    def window_s(self) -> int:
        return self.slot_s * self.slots


LEVELS = (Level("1h", 300, 12), Level("1d", 3600, 24), Level("7d", 86400, 7))
DIURNAL_ALPHA = 0.5  # weight of the newest day in the hourly shape: half-life of one day


@dataclass(frozen=True)
class Stats:
    p50: float
    p90: float
    p95: float
    p99: float
    max: float
    count: int

    def as_dict(self) -> dict[str, float]:
        return {"p50": self.p50, "p90": self.p90, "p95": self.p95, "p99": self.p99, "max": self.max}


def _quantile_buckets(counts: dict[int, int]) -> tuple[int, int, int, int]:
    """Bucket of each of QUANTILES: the first where the running count reaches p x total."""
    items = sorted(counts.items())
    total = sum(c for _, c in items)
    # 0.9 x 60 is 54.000000000000007 in floats: a hair of slack keeps exact ranks exact.
    thresholds = [p * total * (1 - 1e-12) for p in QUANTILES]
    out = []
    running = 0
    i = 0
    for b, c in items:
        running += c
        while i < len(thresholds) and running >= thresholds[i]:
            out.append(b)
            i += 1
        if i == len(thresholds):
            break
    while len(out) < len(thresholds):
        out.append(items[-1][0])
    return out[0], out[1], out[2], out[3]


_F4 = struct.Struct("<f")
_SLOT = struct.Struct("<iI4Bf")  # slot index, samples, p50/p90/p95/p99 bucket indices, max


def _as_f4(x: float) -> float:
    """Maxima are checkpointed as float32; rounding them on entry makes a reload exact."""
    return _F4.unpack(_F4.pack(x))[0]


class _Series:
    """One resource at one level: the open slot's bucket counts and the ring of closed slots."""

    __slots__ = ("counts", "level", "open_max", "open_slot", "ring", "scheme")

    def __init__(self, scheme: BucketScheme, level: Level) -> None:
        self.scheme = scheme
        self.level = level
        self.open_slot: int | None = None
        self.counts: dict[int, int] = {}  # bucket -> samples in the open slot (few distinct buckets)
        self.open_max = 0.0
        # (slot index, count, 4 quantile bucket indices, max)
        # closed slots packed as _SLOT records (16 bytes): far smaller in memory than tuples
        self.ring: deque[bytes] = deque(maxlen=level.slots)

    def close(self) -> tuple[int, int, tuple[int, int, int, int], float] | None:
        if self.open_slot is None or not self.counts:
            return None
        closed = (self.open_slot, sum(self.counts.values()), _quantile_buckets(self.counts), self.open_max)
        self.ring.append(_SLOT.pack(closed[0], closed[1], *closed[2], closed[3]))
        self.counts = {}
        self.open_max = 0.0
        return closed

    def add(self, t: float, bucket: int, value: float):
        slot = int(t // self.level.slot_s)
        closed = None
        if self.open_slot is None:
            self.open_slot = slot
        elif slot > self.open_slot:
            closed = self.close()
            self.open_slot = slot
        # A late sample for an already closed slot is counted in the open one rather than dropped.
        counts = self.counts
        counts[bucket] = counts.get(bucket, 0) + 1
        if value > self.open_max:
            self.open_max = _as_f4(value)
        return closed

    def stats(self, now: float) -> Stats | None:
        oldest = int(now // self.level.slot_s) - self.level.slots + 1
        values: list[np.ndarray] = []
        masses: list[np.ndarray] = []
        vmax = -1.0
        n_total = 0
        for rec in self.ring:
            slot, n, *q, mx = _SLOT.unpack(rec)
            if slot < oldest:
                continue
            vals = [self.scheme.value_of(b) for b in q]
            values.append(np.array(vals + [mx]))
            masses.append(_MASSES * n)
            vmax = max(vmax, mx)
            n_total += n
        if self.open_slot is not None and self.open_slot >= oldest and self.counts:
            values.append(np.array([self.scheme.value_of(b) for b in self.counts]))
            masses.append(np.array(list(self.counts.values()), dtype=np.float64))
            vmax = max(vmax, self.open_max)
            n_total += sum(self.counts.values())
        if n_total == 0:
            return None
        v = np.concatenate(values)
        m = np.concatenate(masses)
        order = np.argsort(v, kind="stable")
        v, cs = v[order], np.cumsum(m[order])
        qs = [min(float(v[min(int(np.searchsorted(cs, p * cs[-1] * (1 - 1e-12))), v.size - 1)]), vmax) for p in QUANTILES]
        return Stats(*qs, max=vmax, count=n_total)


class UsageProfile:
    def __init__(self) -> None:
        self.cpu = [_Series(CPU_SCHEME, lv) for lv in LEVELS]
        self.memory = [_Series(MEMORY_SCHEME, lv) for lv in LEVELS]
        # float32, as checkpointed, so that a reload is exact
        self.diurnal_cpu = np.full(24, np.nan, dtype=np.float32)
        self.diurnal_memory = np.full(24, np.nan, dtype=np.float32)

    def add(self, t: float, cpu_cores: float | None, memory_bytes: float | None) -> None:
        if cpu_cores is not None:
            self._add(self.cpu, CPU_SCHEME, self.diurnal_cpu, t, cpu_cores)
        if memory_bytes is not None:
            self._add(self.memory, MEMORY_SCHEME, self.diurnal_memory, t, memory_bytes)

    @staticmethod
    def _add(series: list[_Series], scheme: BucketScheme, diurnal: np.ndarray, t: float, value: float) -> None:
        b = scheme.find_bucket(value)
        for s in series:
            closed = s.add(t, b, value)
            if closed is not None and s.level.slot_s == 3600:
                hour = closed[0] % 24
                p90 = scheme.value_of(closed[2][1])
                old = diurnal[hour]
                diurnal[hour] = p90 if math.isnan(old) else DIURNAL_ALPHA * p90 + (1 - DIURNAL_ALPHA) * old

    def windows(self, now: float) -> dict[int, tuple[Stats | None, Stats | None]]:
        """window seconds -> (cpu stats, memory stats) as of `now`."""
        return {lv.window_s: (c.stats(now), m.stats(now)) for lv, c, m in zip(LEVELS, self.cpu, self.memory)}

    def diurnal(self) -> tuple[list[float | None], list[float | None]]:
        """Per UTC hour of day, the smoothed hourly p90 (None for hours never seen)."""

        def conv(a: np.ndarray) -> list[float | None]:
            return [None if math.isnan(x) else float(x) for x in a]

        return conv(self.diurnal_cpu), conv(self.diurnal_memory)

    # ------------------------------------------------------------------ checkpoint

    _SERIES = struct.Struct("<iHfH")  # open slot (-1 none), open nonzero buckets, open max, ring length

    def save(self) -> bytes:
        parts = []
        for s in self.cpu + self.memory:
            nz = sorted(s.counts)
            parts.append(self._SERIES.pack(-1 if s.open_slot is None else s.open_slot, len(nz), s.open_max, len(s.ring)))
            parts.append(bytes(nz) + np.array([s.counts[b] for b in nz], dtype="<u4").tobytes())
            parts.extend(s.ring)
        parts.append(self.diurnal_cpu.astype("<f4").tobytes() + self.diurnal_memory.astype("<f4").tobytes())
        return b"".join(parts)

    @classmethod
    def load(cls, data: bytes) -> UsageProfile:
        p = cls()
        off = 0
        for s in p.cpu + p.memory:
            open_slot, nnz, open_max, nring = cls._SERIES.unpack_from(data, off)
            off += cls._SERIES.size
            idx = data[off : off + nnz]
            off += nnz
            counts = np.frombuffer(data, dtype="<u4", count=nnz, offset=off)
            off += 4 * nnz
            s.counts = {int(b): int(c) for b, c in zip(idx, counts)}
            s.open_slot = None if open_slot < 0 else open_slot
            s.open_max = float(open_max)
            for _ in range(nring):
                s.ring.append(bytes(data[off : off + _SLOT.size]))
                off += _SLOT.size
        p.diurnal_cpu = np.frombuffer(data, dtype="<f4", count=24, offset=off).astype(np.float32)
        off += 96
        p.diurnal_memory = np.frombuffer(data, dtype="<f4", count=24, offset=off).astype(np.float32)
        return p
