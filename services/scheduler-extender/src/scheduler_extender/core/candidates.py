"""The node lists requests carry, recognised by their JSON bytes, with the verdicts kept on them.

kube-scheduler sends prioritize exactly the names the filter passed, and while the cluster is
steady each pod's filter gets the same candidates as the last one's. A list seen lately is
found by comparing bytes (a memcmp), so its names need no decoding and no lookups, and the
verdicts last given over it (see memo) can be reused for the next pod of the same shape.
"""

from __future__ import annotations

from typing import Any

import numpy as np


class Candidates:
    """One node list: names, their table rows, positions of names the table does not know."""

    __slots__ = ("_distinct", "_position", "missing", "names", "parent", "raw", "rows", "table_size", "verdicts")

    MAX_VERDICTS = 8  # pod shapes kept per list, the oldest dropped first (each holds a reply)

    def __init__(
        self,
        names: list,
        rows: np.ndarray,
        missing: list[int],
        raw: bytes | None,
        table_size: int,
        distinct: bool | None = None,
    ) -> None:
        self.names = names
        self.rows = rows
        self.missing = missing
        self.raw = raw  # the JSON array as it arrived (None: not recognisable again)
        self.table_size = table_size  # rows in the table when the names were looked up
        self.verdicts: dict[Any, Any] = {}  # (verb, pod shape) -> the last verdict over this list
        self._distinct = distinct  # no row twice (None: not checked yet)
        # the list this one took over from (a filter's passed list before its outcome changed):
        # its verdicts seed this list's first ones
        self.parent: Candidates | None = None
        self._position: np.ndarray | None = None  # table row -> position in the list, -1 if absent

    @property
    def memoizable(self) -> bool:
        """Verdicts over this list can be kept: it comes again, every name has a row, none twice."""
        if self.raw is None or self.missing:
            return False
        if self._distinct is None:
            where = self._where()
            self._distinct = bool((where.take(self.rows) == np.arange(len(self.rows))).all())
        return self._distinct

    def _where(self) -> np.ndarray:
        if self._position is None:
            where = np.full(self.table_size, -1, dtype=np.intp)
            where[self.rows] = np.arange(len(self.rows))  # with a row twice, the later position wins
            self._position = where
        return self._position

    def positions_of(self, rows: list[int]) -> dict[int, int]:
        """position -> row, for those of `rows` that this list holds."""
        where = self._where()
        n = len(where)  # rows added to the table later are in no list made before
        out = {}
        for r in rows:
            if r < n and (i := int(where[r])) >= 0:
                out[i] = r
        return out

    def positions_in(self, other: Candidates) -> np.ndarray:
        """Each of this list's rows' position in `other`, -1 where `other` does not hold it."""
        where = other._where()
        inside = self.rows < len(where)
        at = where.take(self.rows, mode="clip")
        if not inside.all():
            at[~inside] = -1
        return at

    def subset(self, names: list, rows: np.ndarray, raw: bytes, table_size: int) -> Candidates:
        """A list of some of these candidates (distinct when these are)."""
        return Candidates(names, rows, [], raw, table_size, True if self._distinct else None)

    def keep(self, key: Any, verdict: Any) -> None:
        verdicts = self.verdicts
        if key not in verdicts and len(verdicts) >= self.MAX_VERDICTS:
            del verdicts[next(iter(verdicts))]
        verdicts[key] = verdict


class RecentCandidates:
    """The last few node lists, newest last."""

    LIMIT = 8

    def __init__(self) -> None:
        self._lists: list[Candidates] = []

    def find(self, raw: bytes, table_size: int) -> Candidates | None:
        """The list with these bytes, while still right: rows never move, so a list stays right
        until a name that was unknown gets a row."""
        for c in reversed(self._lists):
            if c.raw == raw:
                if c.missing and c.table_size != table_size:
                    return None
                return c
        return None

    def remember(self, c: Candidates) -> Candidates:
        """Keep `c` as the newest list. An older list with the same bytes may stay behind it:
        `find` meets the newest first, and the oldest lists are dropped first."""
        lists = self._lists
        if lists and lists[-1] is c:
            return c
        c.rows.flags.writeable = False  # shared by every request that hits it
        try:
            lists.remove(c)  # by identity: Candidates do not compare by value
        except ValueError:
            if len(lists) >= self.LIMIT:
                del lists[0]
        lists.append(c)
        return c
