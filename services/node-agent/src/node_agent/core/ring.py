"""Bounded rings of per-second (cpu, memory) samples, one column ("slot") per series.

One `SlotRing` holds every series of one kind on one node (the node itself, its pods, or
its containers) in a single numpy block of shape (capacity, slots, 2), so that a whole
collection round is one row write and every aggregation is one vectorised call over all
pods. A series that has no sample in a round holds NaN there. Values are CPU in
milli-cores (float: rates are fractional) and memory in bytes (float64 is exact below
2**53 bytes).
"""

from __future__ import annotations

from collections.abc import Hashable, Iterable, Sequence
from itertools import chain

import numpy as np

CPU = 0
MEM = 1


class SlotRing:
    def __init__(self, capacity: int, slots: int = 4) -> None:
        if capacity < 1:
            raise ValueError("ring capacity must be at least 1")
        self.capacity = capacity
        self._ts = np.zeros(capacity, dtype=np.int64)
        self._values = np.full((capacity, max(slots, 1), 2), np.nan)
        self._head = 0  # next row to write
        self._size = 0
        self._slot: dict[Hashable, int] = {}
        self._free: list[int] = list(range(max(slots, 1) - 1, -1, -1))
        self._last_keys: tuple = ()  # the keys of the last push and their slots
        self._last_slots = np.zeros(0, dtype=np.intp)

    # -- series

    def __len__(self) -> int:
        return self._size

    def __contains__(self, key: Hashable) -> bool:
        return key in self._slot

    def series(self) -> list[Hashable]:
        return list(self._slot)

    def slot_of(self, key: Hashable) -> int:
        slot = self._slot.get(key)
        if slot is None:
            if not self._free:
                self._grow()
            slot = self._free.pop()
            self._slot[key] = slot
        return slot

    def forget(self, key: Hashable) -> None:
        """Drop a series (pod gone): its column is cleared so the slot can be reused."""
        slot = self._slot.pop(key, None)
        self._last_keys = ()
        if slot is not None:
            self._values[:, slot, :] = np.nan
            self._free.append(slot)

    def retain(self, keys: Iterable[Hashable]) -> None:
        alive = set(keys)
        for key in [k for k in self._slot if k not in alive]:
            self.forget(key)

    def _grow(self) -> None:
        old = self._values.shape[1]
        grown = np.full((self.capacity, old * 2, 2), np.nan)
        grown[:, :old, :] = self._values
        self._values = grown
        self._free.extend(range(old * 2 - 1, old - 1, -1))

    # -- samples

    def push(self, ts_ms: int, samples: dict[Hashable, tuple[float, float]]) -> None:
        """One collection round: every series not in `samples` gets NaN for it."""
        keys = tuple(samples)
        if keys != self._last_keys:  # a node's pods are the same round after round: map them once
            known = self._slot
            self._last_slots = np.array([known[k] if k in known else self.slot_of(k) for k in keys], dtype=np.intp)
            self._last_keys = keys
        row = self._head
        self._values[row] = np.nan
        if keys:
            flat = np.fromiter(chain.from_iterable(samples.values()), dtype=np.float64, count=2 * len(keys))
            self._values[row, self._last_slots, :] = flat.reshape(-1, 2)
        self._ts[row] = ts_ms
        self._head = (row + 1) % self.capacity
        self._size = min(self._size + 1, self.capacity)

    def push_arrays(self, ts_ms: int, keys: Sequence[Hashable], values: np.ndarray) -> None:
        """Same as `push` for callers that already hold an (n, 2) array."""
        slots = [self.slot_of(k) for k in keys]
        row = self._head
        self._values[row] = np.nan
        if slots:
            self._values[row, slots, :] = values
        self._ts[row] = ts_ms
        self._head = (row + 1) % self.capacity
        self._size = min(self._size + 1, self.capacity)

    def last_ts(self) -> int | None:
        if not self._size:
            return None
        return int(self._ts[(self._head - 1) % self.capacity])

    def window(self, since_ms: int, until_ms: int | None = None) -> tuple[np.ndarray, np.ndarray]:
        """(ts, values) of the rounds with since_ms < ts <= until_ms, oldest first.

        values has shape (n, slots, 2); index it with `slot_of(key)` / `columns()`.
        """
        return self.take(self.rows(since_ms, until_ms))

    def rows(self, since_ms: int, until_ms: int | None = None) -> np.ndarray:
        """The row indexes `window` reads, oldest first."""
        if not self._size:
            return np.zeros(0, dtype=np.intp)
        start = (self._head - self._size) % self.capacity
        order = (np.arange(self._size) + start) % self.capacity
        ts = self._ts[order]
        keep = ts > since_ms
        if until_ms is not None:
            keep &= ts <= until_ms
        return order[keep]

    def take(self, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(ts, values) of those rows."""
        return self._ts[rows], self._values[rows]

    def timeline(self) -> tuple:
        """What `rows` depends on besides its bounds: rings with equal timelines (the histories
        one agent records in the same rounds) select the same rows for the same bounds."""
        return self.capacity, self._head, self._size, self._ts.tobytes()

    def columns(self) -> tuple[list[Hashable], np.ndarray]:
        """The live keys and their slot indexes, in insertion order."""
        keys = list(self._slot)
        return keys, np.fromiter((self._slot[k] for k in keys), dtype=np.intp, count=len(keys))
