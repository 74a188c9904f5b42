"""CPU rates from monotonic counters (cgroup cpuacct.usage / cpu.stat usage_usec, /proc/stat ticks).

The first read of a counter is only a baseline (no usage that round, as koordlet does). A
counter that went backwards (a cgroup re-created under the same path, a container restart)
becomes the new baseline instead of a negative rate. Series that vanish are dropped by
`retain`, and any baseline older than `ttl_ns` (koordlet: collect interval x 20) is
treated as missing, so a cgroup that disappears and comes back never yields a rate across
the gap.
"""

from __future__ import annotations

from collections.abc import Hashable, Iterable


class CounterRates:
    def __init__(self, ttl_ns: int = 20 * 1_000_000_000) -> None:
        self.ttl_ns = ttl_ns
        self._prev: dict[Hashable, tuple[int, int]] = {}
        self.resets = 0

    def rate(self, key: Hashable, counter: int, t_ns: int) -> float | None:
        """Counter units per second since the previous read of `key`, or None (baseline)."""
        prev = self._prev.get(key)
        self._prev[key] = (counter, t_ns)
        if prev is None:
            return None
        prev_counter, prev_t = prev
        dt = t_ns - prev_t
        if dt <= 0 or dt > self.ttl_ns:
            return None
        if counter < prev_counter:
            self.resets += 1
            return None
        return (counter - prev_counter) * 1e9 / dt

    def forget(self, key: Hashable) -> None:
        self._prev.pop(key, None)

    def retain(self, keys: Iterable[Hashable]) -> None:
        alive = set(keys)
        for key in [k for k in self._prev if k not in alive]:
            del self._prev[key]

    def __len__(self) -> int:
        return len(self._prev)
