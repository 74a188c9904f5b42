"""A columnar view of every node, kept current row by row, so one request is a few numpy gathers.

kube-scheduler sends up to thousands of node names per call; judging them one Python object at
a time would cost more than decoding the request. Each node owns one row; the state rewrites
that row when its metric, pods, batch allocatable or reservations change, and a request reads
whole columns for the candidate rows at once. Every write is logged by row, so that verdicts
kept from an earlier request are brought up to date by judging the rows written since.
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

# Derived from the columns above whenever a row changes (loadaware.derive_row), so that a request
# compares each candidate against one precomputed number instead of redoing the percent maths.
DERIVED_INT_COLUMNS = (
    "lim_cpu",
    "lim_mem",  # filter, non-prod pods: the estimate at which the node fails its threshold set
    "plim_cpu",
    "plim_mem",  # filter, prod pods
    "sfree_cpu",
    "sfree_mem",  # score, non-prod pods: allocatable - the usage scores are computed over
    "psfree_cpu",
    "psfree_mem",  # score, prod pods
    "salloc_cpu",
    "salloc_mem",  # allocatable, 1 where it is 0 (a divisor)
    "bfree_cpu",
    "bfree_mem",  # batch allocatable - batch requested
    "expire_at",  # filter: the metric counts as expired from this time (never without a metric)
    "valid_until",  # score: the metric counts until this time (never valid without a metric)
)
DERIVED_BOOL_COLUMNS = ("agg_n", "agg_p")  # the filter's threshold set is the aggregated one (non-prod, prod)
ALL_COLUMNS = INT_COLUMNS + BOOL_COLUMNS + DERIVED_INT_COLUMNS + DERIVED_BOOL_COLUMNS
# Each kind is one two-dimensional array (column x row): a column is a contiguous view for the
# gathers of a request, and a row's many columns are read or written in one numpy call.
_INTS = INT_COLUMNS + DERIVED_INT_COLUMNS
_BOOLS = BOOL_COLUMNS + DERIVED_BOOL_COLUMNS
INT_INDEX = {col: k for k, col in enumerate(_INTS)}
BOOL_INDEX = {col: k for k, col in enumerate(_BOOLS)}
NEVER = int(np.iinfo(np.int64).max)  # a limit that is never reached, a time that never comes
_KNOWN, _HAS_METRIC = BOOL_INDEX["known"], BOOL_INDEX["has_metric"]
_AGG = [BOOL_INDEX["agg_n"], BOOL_INDEX["agg_p"]]
_EXPIRE_AT = INT_INDEX["expire_at"]


class NodeTable:
    def __init__(self, capacity: int = 256) -> None:
        self.capacity = capacity
        self.names: list[str] = []
        self._name_array = np.empty(0, dtype=object)
        self.index: dict[str, int] = {}
        self._compacted = 0
        # Rows in the order they were written (the change log): verdicts computed at version v
        # are brought up to date by redoing only the rows written since.
        self._changes: list[int] = []
        self._changes_base = 0  # the version of _changes[0]
        self._ints = np.zeros((len(_INTS), capacity), dtype=np.int64)
        self._bools = np.zeros((len(_BOOLS), capacity), dtype=bool)
        self._bind_columns()
        # What holds for every row, kept up to date as rows change, so that a request can skip
        # a check no candidate can fail: rows not known / without a metric / with aggregated
        # thresholds, and the earliest metric expiry (None: to be recomputed).
        self._n_unknown = 0
        self._n_no_metric = 0
        self._n_agg = 0
        self._earliest_expiry: int | None = NEVER
        self.move_kind: dict[int, tuple] = {}  # row -> what decides how an added pod moves it (loadaware)

    def _bind_columns(self) -> None:
        for k, col in enumerate(_INTS):
            setattr(self, col, self._ints[k])
        for k, col in enumerate(_BOOLS):
            setattr(self, col, self._bools[k])

    def compact_index(self) -> None:
        """Rebuild the name index with freshly allocated keys, laid out together in memory.

        Every request looks up thousands of names; keys created one by one as nodes appeared
        are scattered over the heap, and each lookup's key comparison then misses the CPU cache.
        """
        if self._compacted == len(self.names):
            return
        # the names by row share the new keys: gathering and encoding names reads them in order
        self.names = [name.encode().decode() for name in self.names]
        self.index = {name: r for r, name in enumerate(self.names)}
        self._name_array = np.empty(0, dtype=object)
        self._compacted = len(self.names)

    def name_array(self) -> np.ndarray:
        """The names by row as a numpy object array (gathering names by rows without a loop)."""
        if len(self._name_array) != len(self.names):
            arr = np.empty(len(self.names), dtype=object)
            arr[:] = self.names
            self._name_array = arr
        return self._name_array

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
        self._n_unknown += 1  # a new row is all zero: not known, no metric
        self._n_no_metric += 1
        return r

    def _grow(self, capacity: int) -> None:
        ints = np.zeros((len(_INTS), capacity), dtype=np.int64)
        ints[:, : self.capacity] = self._ints
        bools = np.zeros((len(_BOOLS), capacity), dtype=bool)
        bools[:, : self.capacity] = self._bools
        self._ints, self._bools = ints, bools
        self.capacity = capacity
        self._bind_columns()

    def set(self, r: int, **values) -> None:
        ints = [(INT_INDEX[c], v) for c, v in values.items() if c in INT_INDEX]
        bools = [(BOOL_INDEX[c], v) for c, v in values.items() if c in BOOL_INDEX]
        if len(ints) + len(bools) != len(values):
            raise KeyError(f"unknown columns: {sorted(set(values) - set(INT_INDEX) - set(BOOL_INDEX))}")
        self._changed(r)
        if ints:
            idx, vals = zip(*ints)
            self._ints[list(idx), r] = vals
        if bools:
            was_known, had_metric = bool(self._bools[_KNOWN, r]), bool(self._bools[_HAS_METRIC, r])
            idx, vals = zip(*bools)
            self._bools[list(idx), r] = vals
            self._n_unknown += was_known - bool(self._bools[_KNOWN, r])
            self._n_no_metric += had_metric - bool(self._bools[_HAS_METRIC, r])

    CHANGE_LOG = 4096  # rows kept in the change log; older verdicts are recomputed whole

    def version(self) -> int:
        """Counts row writes: equal versions mean no row changed in between."""
        return self._changes_base + len(self._changes)

    def changed_since(self, version: int) -> list[int] | None:
        """Rows written since `version` (repeats possible); None when the log no longer reaches back."""
        k = version - self._changes_base
        return None if k < 0 else self._changes[k:]

    def _changed(self, r: int) -> None:
        log = self._changes
        log.append(r)
        if len(log) > 2 * self.CHANGE_LOG:
            del log[: self.CHANGE_LOG]
            self._changes_base += self.CHANGE_LOG

    def all_known(self) -> bool:
        """Every row holds a known node."""
        return self._n_unknown == 0

    def all_have_metrics(self) -> bool:
        return self._n_no_metric == 0

    def any_aggregated(self) -> bool:
        """Some row judges by aggregated usage thresholds."""
        return self._n_agg > 0

    def earliest_expiry(self) -> int:
        """The earliest expire_at of any row (NEVER when no row has a metric)."""
        if self._earliest_expiry is None:
            n = len(self.names)
            self._earliest_expiry = int(self.expire_at[:n].min()) if n else NEVER
        return self._earliest_expiry

    def add(self, r: int, deltas: np.ndarray) -> None:
        """Add `deltas` (one per int column, in INT_INDEX order) to row r."""
        self._ints[:, r] += deltas
        self._changed(r)

    def pair(self, first: str) -> np.ndarray:
        """The (cpu, memory) columns starting at `first` as one (2, capacity) view: a request
        gathers both resources in one call."""
        k = INT_INDEX[first]
        return self._ints[k : k + 2]

    def set_derived(self, r: int, ints: list[int], bools: list[bool]) -> None:
        """Write row r's derived columns, in DERIVED_INT_COLUMNS and DERIVED_BOOL_COLUMNS order."""
        self._changed(r)
        old_expiry, old_agg = int(self._ints[_EXPIRE_AT, r]), bool(self._bools[_AGG, r].any())
        self._ints[len(INT_COLUMNS) :, r] = ints
        self._bools[len(BOOL_COLUMNS) :, r] = bools
        self._n_agg += bool(self._bools[_AGG, r].any()) - old_agg
        expiry, earliest = int(self._ints[_EXPIRE_AT, r]), self._earliest_expiry
        if earliest is not None:
            if expiry < earliest:
                self._earliest_expiry = expiry
            elif old_expiry == earliest and expiry != old_expiry:
                self._earliest_expiry = None  # the earliest row moved on: recompute when asked

    def row_values(self, r: int) -> tuple[list[int], list[bool]]:
        """Every int and bool column of row r, indexed by INT_INDEX and BOOL_INDEX."""
        return self._ints[:, r].tolist(), self._bools[:, r].tolist()

    def copy_row(self, src: NodeTable, r: int, to: int) -> None:
        self._ints[:, to] = src._ints[:, r]
        self._bools[:, to] = src._bools[:, r]
        self._changed(to)
        self._recount()

    def _recount(self) -> None:
        n = len(self.names)
        self._n_unknown = int((~self.known[:n]).sum())
        self._n_no_metric = int((~self.has_metric[:n]).sum())
        self._n_agg = int((self.agg_n[:n] | self.agg_p[:n]).sum())
        self._earliest_expiry = None

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
