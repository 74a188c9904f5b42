"""A cache that keeps what is in use: the entries not read or written during one whole round are
forgotten when the next begins.

A service that derives facts of every pod each round (and keys them by uid and resourceVersion)
keeps them while the pods live. A size cap instead would let a long-running service hold every
pod it ever saw until the cap, then drop the live ones with the dead.
"""

from __future__ import annotations

from typing import Generic, TypeVar

K = TypeVar("K")
V = TypeVar("V")


class RoundCache(Generic[K, V]):
    __slots__ = ("_before", "_now")

    def __init__(self) -> None:
        self._now: dict[K, V] = {}  # read or written this round
        self._before: dict[K, V] = {}  # the last round's, not yet used in this one

    def get(self, key: K) -> V | None:
        value = self._now.get(key)
        if value is None:
            value = self._before.pop(key, None)
            if value is not None:
                self._now[key] = value
        return value

    def put(self, key: K, value: V) -> None:
        self._now[key] = value

    def new_round(self) -> None:
        """Forget what the round that ended did not use."""
        self._before, self._now = self._now, {}

    def __len__(self) -> int:
        return len(self._now) + len(self._before)
