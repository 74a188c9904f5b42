"""A columnar view of every node, kept current row by row, so one request is a few numpy gathers.

kube-scheduler sends up to thousands of node names per call; judging them one Python object at
a time would cost more than decoding the request. Each node owns one row; the state rewrites
that row when its metric, pods, batch allocatable or reservations change, and a request reads
whole columns for the candidate rows at once.
"""

from __future__ import annotations

import numpy as np

INT_COLUMNS = (
    "alloc_cpu",
    "alloc_mem",  # EstimateNode: node allocatable (milli-cores, bytes)
    "exist_cpu",
    "exist_mem",  # NodeMetric usage + estimate of assigned pods not in it yet
    "prod_cpu",
    "prod_mem",  # prod pods' usage + their pending estimates
    "aggf_cpu",
    "aggf_mem",  # aggregated usage (filter percentile) + pending estimates
    "aggs_cpu",
    "aggs_mem",  # aggregated usage (score percentile) + pending estimates
    "update_ms",  # NodeMetric update time
    "thr_cpu",
    "thr_mem",  # usageThresholds (percent; 0 = off), per node after overrides
    "pthr_cpu",
    "pthr_mem",  # prodUsageThresholds
    "athr_cpu",
    "athr_mem",  # aggregated usageThresholds
    "bal_cpu",
    "bal_mem",  # batch allocatable (milli-cores, bytes)
    "breq_cpu",
    "breq_mem",  # batch requested by the node's pods
)
BOOL_COLUMNS = ("known", "has_metric", "has_prod_thr", "has_agg_thr", "has_resv")


class NodeTable:
    def __init__(self, capacity: int = 256) -> None:
        self.capacity = capacity
        self.names: list[str] = []
        self.index: dict[str, int] = {}
        self._compacted = 0
        for col in INT_COLUMNS:
            setattr(self, col, np.zeros(capacity, dtype=np.int64))
        for col in BOOL_COLUMNS:
            setattr(self, col, np.zeros(capacity, dtype=bool))

    def compact_index(self) -> None:
        """Rebuild the name index with freshly allocated keys, laid out together in memory.

        Every request looks up thousands of names; keys created one by one as nodes appeared
        are scattered over the heap, and each lookup's key comparison then misses the CPU cache.
        """
        if self._compacted == len(self.names):
            return
        self.index = {name.encode().decode(): r for name, r in self.index.items()}
        self._compacted = len(self.names)

    def __len__(self) -> int:
        return len(self.names)

    def row(self, name: str) -> int:
        """The row of `name`, created (all zero, not yet known) on first use."""
        r = self.index.get(name)
        if r is not None:
            return r
        r = len(self.names)
        if r >= self.capacity:
            self._grow(self.capacity * 2)
        self.names.append(name)
        self.index[name] = r
        return r

    def _grow(self, capacity: int) -> None:
        for col in INT_COLUMNS + BOOL_COLUMNS:
            old = getattr(self, col)
            new = np.zeros(capacity, dtype=old.dtype)
            new[: self.capacity] = old
            setattr(self, col, new)
        self.capacity = capacity

    def set(self, r: int, **values) -> None:
        for col, v in values.items():
            getattr(self, col)[r] = v

    def get(self, r: int, col: str):
        return getattr(self, col)[r].item()

    def rows_of(self, names: list) -> tuple[np.ndarray, list[int]]:
        """Rows of `names` in order, and the positions of names the table does not know.

        Unknown names get row 0 in the array; callers mask them with the returned positions
        (and with the `known` column for rows that exist but hold no data yet). A name that is
        not a string raises TypeError.
        """
        try:
            found = list(map(self.index.__getitem__, names))
            missing: list[int] = []
        except (KeyError, TypeError):
            if not all(isinstance(n, str) for n in names):
                raise TypeError("node names must be strings") from None
            get = self.index.get
            found = [get(n, -1) for n in names]
            missing = [i for i, r in enumerate(found) if r < 0]
            for i in missing:
                found[i] = 0
        return np.fromiter(found, dtype=np.intp, count=len(found)), missing
