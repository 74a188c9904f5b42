"""Usage profile per workload container: p50/p90/p95/p99/max over 1 h, 1 d and 7 d, and a
24-hour diurnal shape.

Each window is a ring of closed slots (12 x 5 min, 24 x 1 h, 7 x 1 d) plus the open slot.
A closed slot keeps only its sample count, its p50/p90/p95/p99 as bucket indices of the VPA
bucket scheme and its exact max (12 bytes), which is what bounds the state per container.
A window's percentile pools the slots, each slot standing for its samples as masses
0.5/0.4/0.05/0.04/0.01 at its p50/p90/p95/p99/max; this is exact when the slots share one
distribution and leans high (never low by more than one slot quantile) otherwise. The open
slot contributes its exact bucket counts. Values are cores (CPU) and bytes (memory).

In memory a profile is two buffers rather than objects per window (see _Track): a bytearray
with, per resource, the open hour's latest samples, the open slots' maxima, the rings and the
diurnal shape; and a small-integer array with bucket counts, as dense bucket ranges, of the
samples the bytearray has no room for. The three windows of a resource see the same samples,
so a sample is kept once, for the open 5-minute slot, and a slot that closes passes its
samples on to the open slot of the next level.
"""

from __future__ import annotations

import math
import struct
from array import array
from dataclasses import dataclass
from itertools import pairwise

import numpy as np

from .histogram import CPU_SCHEME, MEMORY_SCHEME

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


def _quantile_buckets(items: list[tuple[int, int]]) -> tuple[int, int, int, int]:
    """Bucket of each of QUANTILES over (bucket, count) pairs in bucket order: the first
    bucket where the running count reaches p x total."""
    if len(items) == 1:
        return (items[0][0],) * 4
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


def _rank_quantiles(samples: list[int]) -> tuple[int, ...]:
    """_quantile_buckets of single samples, sorted: the running count reaches p x total at
    sample ceil(p x total)."""
    n = len(samples)
    if n == 1:
        return (samples[0],) * len(QUANTILES)
    return tuple([samples[math.ceil(p * n * (1 - 1e-12)) - 1] for p in QUANTILES])


_SLOT = struct.Struct("<iI4Bf")  # slot index, samples, p50/p90/p95/p99 bucket indices, max
_F4 = struct.Struct("<f")  # maxima are checkpointed as float32 and rounded so on entry
_F8 = struct.Struct("<d")

CPU, MEMORY = 0, 1  # resource index in a UsageProfile
_SCHEMES = (CPU_SCHEME, MEMORY_SCHEME)

BASE_S = LEVELS[0].slot_s
STEPS = tuple(lv.slot_s // BASE_S for lv in LEVELS)  # each level's slot in 5-minute slots
assert all(lv.slot_s == s * BASE_S for lv, s in zip(LEVELS, STEPS)) and all(b % a == 0 for a, b in pairwise(STEPS))
DIURNAL_LEVEL = next(i for i, lv in enumerate(LEVELS) if lv.slot_s == 3600)
assert len(LEVELS) == 3  # _Track._lane adds up the lanes before a level by hand

# A resource's part of UsageProfile._buf, by offset from its start:
_END = 0  # float64: end of the open 5-minute slot (-inf before the first sample)
_RAW_N = 8  # u8: samples in _RAW
_RAW_START = 9  # u8: where the open 5-minute slot's samples start in _RAW
_MAX = 12  # float32 per level: max of what its open slot got (level 0: samples; others: closed slots)
_LANES = _MAX + 4 * len(LEVELS)  # u8 pairs per level: first bucket and length of its lane
_RING_META = _LANES + 2 * len(LEVELS)  # u8 pairs per level: next write position, records
_RAW = _RING_META + 2 * len(LEVELS)  # the open hour's latest samples, as bucket indices
_RAW_CAP = 16  # then they move into lanes 0 and 1: sparse series never need those
_RINGS = tuple(_RAW + _RAW_CAP + _SLOT.size * sum(lv.slots for lv in LEVELS[:i]) for i in range(len(LEVELS)))
_DIURNAL = _RINGS[-1] + _SLOT.size * LEVELS[-1].slots  # 24 float32: the diurnal shape
_TRACK = _DIURNAL + 4 * 24
_EMPTY_TRACK = _F8.pack(-math.inf) + bytes(_DIURNAL - 8) + struct.pack("<24f", *[math.nan] * 24)
_HOT = struct.Struct("<dB3xf")  # end, raw samples, lane 0's max: what every sample reads
_MAXES = struct.Struct(f"<{len(LEVELS)}f")
_MAX01 = struct.Struct("<2f")

_SLACK = 8  # buckets a lane may keep beyond those its last slot used
# Counts start as bytes and widen when a count outgrows its type.
_LIMITS = {"B": 0xFF, "H": 0xFFFF, "I": 0xFFFFFFFF}
_WIDER = {"B": "H", "H": "I"}


class UsageProfile:
    """Both resources' windows in two buffers (see _Track for what they hold)."""

    __slots__ = ("_buf", "_counts")

    def __init__(self) -> None:
        self._buf = bytearray(_EMPTY_TRACK * 2)
        self._counts = array("B")

    def add(self, t: float, cpu_cores: float | None, memory_bytes: float | None) -> None:
        if cpu_cores is not None:
            self.add_sample(CPU, t, cpu_cores)
        if memory_bytes is not None:
            self.add_sample(MEMORY, t, memory_bytes)

    def add_sample(self, r: int, t: float, value: float) -> None:
        """One sample of resource r (CPU or MEMORY): the per-sample path, kept flat."""
        b = _SCHEMES[r].find_bucket(value)
        buf = self._buf
        m = _TRACK * r
        end, k, top = _HOT.unpack_from(buf, m)
        if t >= end:
            slot = int(t // BASE_S)
            closing = int(end // BASE_S) - 1 if end != -math.inf else None
            if closing is not None and slot // STEPS[1] == closing // STEPS[1] and not buf[m + _LANES + 1]:
                _close_raw_slot(buf, m, closing)  # the usual case, without the general machinery
            else:
                _Track(self, r).roll(slot, closing)
            _F8.pack_into(buf, m + _END, float((slot + 1) * BASE_S))
            k, top = buf[m + _RAW_N], 0.0  # a new open slot (the hour's samples may stay raw)
        elif not t <= end:
            raise ValueError(f"sample time {t!r} is not a number")
        n0 = buf[m + _LANES + 1]
        if n0 and 0 <= b - buf[m + _LANES] < n0:  # a busy slot has a lane: count there
            i = b - buf[m + _LANES] + (buf[_LANES + 1] + buf[_LANES + 3] + buf[_LANES + 5] if r else 0)
            try:
                self._counts[i] += 1
            except OverflowError:
                _Track(self, r).widen()
                self._counts[i] += 1
        else:
            if k == _RAW_CAP:
                _Track(self, r).flush()
                k = buf[m + _RAW_N]
            buf[m + _RAW + k] = b
            buf[m + _RAW_N] = k + 1
        if value > top:
            _F4.pack_into(buf, m + _MAX, value)  # rounds to float32

    def windows(self, now: float) -> dict[int, tuple[Stats | None, Stats | None]]:
        """window seconds -> (cpu stats, memory stats) as of `now`."""
        cpu, mem = _Track(self, CPU), _Track(self, MEMORY)
        return {lv.window_s: (cpu.stats(i, now), mem.stats(i, now)) for i, lv in enumerate(LEVELS)}

    def diurnal(self) -> tuple[list[float | None], list[float | None]]:
        """Per UTC hour of day, the smoothed hourly p90 (None for hours never seen)."""

        def conv(a: tuple[float, ...]) -> list[float | None]:
            return [None if math.isnan(x) else x for x in a]

        return conv(_Track(self, CPU).diurnal()), conv(_Track(self, MEMORY).diurnal())

    # ------------------------------------------------------------------ checkpoint

    def save(self) -> bytes:
        cpu, mem = _Track(self, CPU), _Track(self, MEMORY)
        return cpu.save() + mem.save() + cpu.diurnal_bytes() + mem.diurnal_bytes()

    @classmethod
    def load(cls, data: bytes) -> UsageProfile:
        p = cls()
        off = _Track(p, CPU).load(data, 0)
        off = _Track(p, MEMORY).load(data, off)  # a view made after CPU's lanes are in place
        if len(data) < off + 192:
            raise ValueError("profile checkpoint is truncated")
        _Track(p, CPU).set_diurnal_bytes(data[off : off + 96])
        _Track(p, MEMORY).set_diurnal_bytes(data[off + 96 : off + 192])
        return p


# ---------------------------------------------------------------------- closing slots


def _close_raw_slot(buf: bytearray, m: int, slot: int) -> None:
    """Close a 5-minute slot whose samples are all raw (no lane 0), the usual case. Its
    samples stay raw, as the hour's."""
    first, k = buf[m + _RAW_START], buf[m + _RAW_N]
    buf[m + _RAW_START] = k
    mx, hour_mx = _MAX01.unpack_from(buf, m + _MAX)  # as _record() does, for level 0
    _MAX01.pack_into(buf, m + _MAX, 0.0, max(hour_mx, mx))
    if k > first:
        raw = sorted(buf[m + _RAW + first : m + _RAW + k])
        _push(buf, m, 0, _SLOT.pack(slot, len(raw), *_rank_quantiles(raw), mx))


def _record(buf: bytearray, m: int, level: int, slot: int, n: int, q: tuple[int, ...] | None) -> None:
    """A level's open slot closed with n samples and quantile buckets q: push it to the ring,
    and pass its max on to the next level's open slot."""
    hi = list(_MAXES.unpack_from(buf, m + _MAX))
    mx = hi[level]
    if level + 1 < len(hi) and mx > hi[level + 1]:
        hi[level + 1] = mx
    hi[level] = 0.0
    _MAXES.pack_into(buf, m + _MAX, *hi)
    if n:
        _push(buf, m, level, _SLOT.pack(slot, n, *q, mx))


def _push(buf: bytearray, m: int, level: int, record: bytes) -> None:
    """Append a closed slot to a level's ring, overwriting the oldest when full."""
    cap, meta = LEVELS[level].slots, m + _RING_META + 2 * level
    pos, n = buf[meta], buf[meta + 1]
    at = m + _RINGS[level] + _SLOT.size * pos
    buf[at : at + _SLOT.size] = record
    buf[meta] = (pos + 1) % cap
    buf[meta + 1] = min(n + 1, cap)


def _merge(a: list[tuple[int, int]], b: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """Two (bucket, count) lists in bucket order added up."""
    if not a or not b:
        return a or b
    merged = dict(a)
    for k, x in b:
        merged[k] = merged.get(k, 0) + x
    return sorted(merged.items())


class _Track:
    """One resource of a UsageProfile at all levels: a short-lived view of the profile's
    buffers, with the lanes' geometry copied out (store() writes it back).

    The open slot of each level is made of: the raw samples (the open hour's latest, up to
    _RAW_CAP; level 0 only from _RAW_START on) and the lanes 0..level, lane l holding counts
    by bucket from slots of level l - 1 already closed within the open slot of level l (lane
    0: the open 5-minute slot's samples when they are too many for _RAW). Lane l covers
    buckets lo..lo + n - 1 and sits in the profile's counts after the lanes before it (CPU's
    three, then memory's). A sample before the end of the open 5-minute slot, even a late
    one, counts in the open slot; one at or after it closes slots.
    """

    __slots__ = ("base", "geo", "m", "moved", "p", "r", "scheme")

    def __init__(self, profile: UsageProfile, r: int) -> None:
        self.p, self.r = profile, r
        self.scheme = _SCHEMES[r]
        self.m = m = _TRACK * r  # this resource's part of _buf
        buf = profile._buf
        self.geo = list(buf[m + _LANES : m + _LANES + 2 * len(LEVELS)])  # per level: lo, n
        self.base = buf[_LANES + 1] + buf[_LANES + 3] + buf[_LANES + 5] if r else 0  # CPU's lanes first
        self.moved = False  # whether geo changed

    def store(self) -> None:
        if self.moved:
            self.p._buf[self.m + _LANES : self.m + _LANES + 2 * len(LEVELS)] = bytes(self.geo)

    # ------------------------------------------------------------------ slots

    def roll(self, slot: int, closing: int | None) -> None:
        """Close, for a sample in 5-minute slot `slot`, the open slot of each level it leaves
        (`closing` is the open 5-minute slot, None before the first sample)."""
        if closing is None:
            return
        for level, step in enumerate(STEPS):
            if slot // step == closing // step:
                break  # a coarser slot cannot change when this one does not
            self._close(level, closing // step)
        self.store()

    def _close(self, level: int, slot: int) -> None:
        """Close the open slot of a level (those of the finer levels are already closed)."""
        buf, m, g = self.p._buf, self.m, self.geo
        first, k = buf[m + _RAW_START], buf[m + _RAW_N]
        if level == 0:
            lane = self._lane_items(0) if g[1] else []
            if g[1]:
                self._reset(0, lane)
            if not lane:
                _close_raw_slot(buf, m, slot)
                return
            # a busy slot: its lane joins the hour's; its raw samples stay raw, as the hour's
            items = _merge(self._raw_items(first, k), lane)
            self._add_items(1, lane)
            buf[m + _RAW_START] = k
        elif level == 1:
            items = self._raw_items(0, k)
            lane = self._lane_items(1) if g[3] else []
            if lane:
                items = _merge(items, lane)
            if g[3]:
                self._reset(1, lane)
            if items:
                self._add_items(2, items)
            buf[m + _RAW_N] = buf[m + _RAW_START] = 0
        else:
            items = self._lane_items(2)
            if g[5]:
                self._reset(2, items)
        q = _quantile_buckets(items) if items else None
        _record(buf, m, level, slot, sum(c for _, c in items), q)
        if level == DIURNAL_LEVEL and q is not None:
            self._smooth_diurnal(slot % 24, self.scheme.value_of(q[1]))

    def open_slot(self) -> int | None:
        """The open slot of level 0 (None before the first sample)."""
        (end,) = _F8.unpack_from(self.p._buf, self.m + _END)
        return None if end == -math.inf else int(end // BASE_S) - 1

    def open_max(self, level: int) -> float:
        return max(_MAXES.unpack_from(self.p._buf, self.m + _MAX)[: level + 1])

    # ------------------------------------------------------------------ raw samples and count lanes

    def _raw_items(self, first: int, stop: int) -> list[tuple[int, int]]:
        """(bucket, count) of raw samples first..stop - 1, in bucket order."""
        at = self.m + _RAW
        items: list[tuple[int, int]] = []
        for b in sorted(self.p._buf[at + first : at + stop]):
            if items and items[-1][0] == b:
                items[-1] = (b, items[-1][1] + 1)
            else:
                items.append((b, 1))
        return items

    def flush(self) -> None:
        """Make room in _RAW: the hour's samples from closed 5-minute slots move to lane 1, or,
        when the open 5-minute slot alone fills it, its samples to lane 0."""
        buf, m = self.p._buf, self.m
        first, k = buf[m + _RAW_START], buf[m + _RAW_N]
        if first:
            self._add_items(1, self._raw_items(0, first))
            at = m + _RAW
            buf[at : at + k - first] = buf[at + first : at + k]
            buf[m + _RAW_N], buf[m + _RAW_START] = k - first, 0
        else:
            self._add_items(0, self._raw_items(0, k))
            buf[m + _RAW_N] = 0
        self.store()

    def _lane(self, level: int) -> tuple[int, int, int]:
        """(offset in counts, first bucket, length) of one of this resource's lanes."""
        g = self.geo
        off = self.base
        if level > 0:
            off += g[1]
        if level > 1:
            off += g[3]
        return off, g[2 * level], g[2 * level + 1]

    def _lane_items(self, level: int) -> list[tuple[int, int]]:
        """(bucket, count) of a lane's counted buckets, in bucket order."""
        off, lo, n = self._lane(level)
        return [(lo + i, x) for i, x in enumerate(self.p._counts[off : off + n]) if x]

    def _add_items(self, level: int, items: list[tuple[int, int]]) -> None:
        """Add (bucket, count) pairs, in bucket order, to a lane."""
        off, lo, n = self._lane(level)
        if not (n and lo <= items[0][0] and items[-1][0] < lo + n):
            self._cover(level, items[0][0], items[-1][0])
            off, lo, _ = self._lane(level)
        c = self.p._counts
        for b, x in items:
            i = off + b - lo
            try:
                c[i] += x
            except OverflowError:
                self.widen(c[i] + x)
                c = self.p._counts
                c[i] += x

    def _cover(self, level: int, lo: int, hi: int) -> None:
        """Widen a lane to buckets lo..hi (new buckets count zero)."""
        off, a, n = self._lane(level)
        if n == 0:
            head, tail, a, n = hi - lo + 1, 0, lo, hi - lo + 1
        else:
            head, tail = max(a - lo, 0), max(hi - (a + n - 1), 0)
            if not head and not tail:
                return
            a, n = a - head, n + head + tail
        c = self.p._counts
        zero = array(c.typecode, [0])
        mid = off + n - head - tail
        # rebuilt rather than resized in place, which would over-allocate
        self.p._counts = c[:off] + zero * head + c[off:mid] + zero * tail + c[mid:]
        self.geo[2 * level : 2 * level + 2] = a, n
        self.moved = True

    def _reset(self, level: int, items: list[tuple[int, int]]) -> None:
        """Zero a closed lane. The next slot likely uses about the same buckets as this one:
        the lane keeps them, but not the extremes of every past slot, so it is narrowed to
        them when it is more than _SLACK buckets wider."""
        off, lo, n = self._lane(level)
        keep_lo, keep = (items[0][0], items[-1][0] - items[0][0] + 1) if items else (0, 0)
        c = self.p._counts
        zero = array(c.typecode, [0])
        if lo <= keep_lo and keep_lo + keep <= lo + n and n - keep <= _SLACK:
            c[off : off + n] = zero * n
        else:
            self.p._counts = c[:off] + zero * keep + c[off + n :]
            self.geo[2 * level : 2 * level + 2] = keep_lo, keep
            self.moved = True

    def widen(self, need: int = 0) -> None:
        tc = _WIDER[self.p._counts.typecode]
        while need > _LIMITS[tc]:
            tc = _WIDER[tc]
        self.p._counts = array(tc, self.p._counts)

    def open_counts(self, level: int) -> list[tuple[int, int]]:
        """(bucket, count) of the open slot of a level, in bucket order."""
        buf, m, g = self.p._buf, self.m, self.geo
        items = self._raw_items(buf[m + _RAW_START] if level == 0 else 0, buf[m + _RAW_N])
        for lane in range(level + 1):
            if g[2 * lane + 1]:
                items = _merge(items, self._lane_items(lane))
        return items

    # ------------------------------------------------------------------ rings and diurnal

    def ring(self, level: int) -> list[bytes]:
        """A level's closed slots as _SLOT records, oldest first."""
        buf, cap, meta = self.p._buf, LEVELS[level].slots, self.m + _RING_META + 2 * level
        pos, n = buf[meta], buf[meta + 1]
        base = self.m + _RINGS[level]
        at = [base + _SLOT.size * ((pos - n + i) % cap) for i in range(n)]
        return [bytes(buf[a : a + _SLOT.size]) for a in at]

    def _smooth_diurnal(self, hour: int, p90: float) -> None:
        at = self.m + _DIURNAL + 4 * hour
        old = np.float32(_F4.unpack_from(self.p._buf, at)[0])
        # float32 arithmetic as in the original numpy array, so the values stay bit-identical
        new = p90 if math.isnan(old) else DIURNAL_ALPHA * p90 + (1 - DIURNAL_ALPHA) * old
        _F4.pack_into(self.p._buf, at, float(np.float32(new)))

    def diurnal(self) -> tuple[float, ...]:
        return struct.unpack_from("<24f", self.p._buf, self.m + _DIURNAL)

    def diurnal_bytes(self) -> bytes:
        return bytes(self.p._buf[self.m + _DIURNAL : self.m + _TRACK])

    def set_diurnal_bytes(self, data: bytes) -> None:
        self.p._buf[self.m + _DIURNAL : self.m + _TRACK] = data

    # ------------------------------------------------------------------ reads

    def stats(self, level: int, now: float) -> Stats | None:
        lv, scheme = LEVELS[level], self.scheme
        oldest = int(now // lv.slot_s) - lv.slots + 1
        values: list[np.ndarray] = []
        masses: list[np.ndarray] = []
        vmax = -1.0
        n_total = 0
        for rec in self.ring(level):
            slot, n, *q, mx = _SLOT.unpack(rec)
            if slot < oldest:
                continue
            vals = [scheme.value_of(b) for b in q]
            values.append(np.array(vals + [mx]))
            masses.append(_MASSES * n)
            vmax = max(vmax, mx)
            n_total += n
        top = self.open_slot()
        counts = self.open_counts(level)
        if top is not None and top // STEPS[level] >= oldest and counts:
            values.append(np.array([scheme.value_of(b) for b, _ in counts]))
            masses.append(np.array([c for _, c in counts], dtype=np.float64))
            vmax = max(vmax, self.open_max(level))
            n_total += sum(c for _, c in counts)
        if n_total == 0:
            return None
        v = np.concatenate(values)
        m = np.concatenate(masses)
        order = np.argsort(v, kind="stable")
        v, cs = v[order], np.cumsum(m[order])
        qs = [min(float(v[min(int(np.searchsorted(cs, p * cs[-1] * (1 - 1e-12))), v.size - 1)]), vmax) for p in QUANTILES]
        return Stats(*qs, max=vmax, count=n_total)

    # ------------------------------------------------------------------ checkpoint

    _SERIES = struct.Struct("<iHfH")  # open slot (-1 none), open nonzero buckets, open max, ring length

    def save(self) -> bytes:
        parts = []
        top = self.open_slot()
        for level, step in enumerate(STEPS):
            counts = self.open_counts(level)
            ring = self.ring(level)
            parts.append(self._SERIES.pack(-1 if top is None else top // step, len(counts), self.open_max(level), len(ring)))
            parts.append(bytes(b for b, _ in counts) + struct.pack(f"<{len(counts)}I", *(c for _, c in counts)))
            parts.extend(ring)
        return b"".join(parts)

    def load(self, data: bytes, off: int) -> int:
        """Restore from what save() wrote at data[off:]; returns the offset after it. The open
        slots' counts go to the lanes (the raw samples start empty)."""
        buf, m = self.p._buf, self.m
        tops, cumulative, maxima = [], [], []
        for level, lv in enumerate(LEVELS):
            top, nnz, mx, nring = self._SERIES.unpack_from(data, off)
            off += self._SERIES.size
            idx = data[off : off + nnz]
            off += nnz
            counts = np.frombuffer(data, dtype="<u4", count=nnz, offset=off).tolist()
            off += 4 * nnz
            if len(set(idx)) != nnz or (nnz and max(idx) >= self.scheme.num_buckets):
                raise ValueError("profile checkpoint holds invalid buckets")
            tops.append(top)
            cumulative.append(dict(zip(idx, counts)))
            maxima.append(mx)
            records = [bytes(data[off + _SLOT.size * i : off + _SLOT.size * (i + 1)]) for i in range(nring)]
            off += _SLOT.size * nring
            for rec in records[-lv.slots :]:  # as a bounded deque would keep them
                _push(buf, m, level, rec)
        # Every level sees the same samples: open slots nest, and so do their counts and maxima.
        if any(t != (-1 if tops[0] < 0 else tops[0] // s) for t, s in zip(tops, STEPS)) or maxima != sorted(maxima):
            raise ValueError("profile checkpoint levels disagree")
        if tops[0] >= 0:
            _F8.pack_into(buf, m + _END, float((tops[0] + 1) * BASE_S))
        _MAXES.pack_into(buf, m + _MAX, *maxima)  # each level's max covers the finer ones: no harm
        below: dict[int, int] = {}
        for level, now in enumerate(cumulative):
            if any(b not in now or now[b] < c for b, c in below.items()):
                raise ValueError("profile checkpoint levels disagree")
            lane = sorted((b, c - below.get(b, 0)) for b, c in now.items() if c - below.get(b, 0))
            if lane:
                self._add_items(level, lane)
            below = now
        self.store()
        return off
