"""kube-scheduler's framework shape inside the extender: plugins with `filter` and `score`.

Each scheduling concern (load-aware, batch/mid fit, reservation, and next CPU/GPU/gang/quota)
is one plugin with a `name`, a `filter` that rejects candidate nodes with a reason and a
`score` that rates them 0-100. The registry (`plugins.registry`) orders them; `run_filter`
runs them as kube-scheduler runs filter plugins: a node rejected by one plugin is not shown to
the next, and its reason is the first rejection. `run_score` sums the plugins' scores weighted
(as kube-scheduler sums weighted plugin scores) and `to_extender_scores` maps the sum to the
extender's 0-10.

To answer "why did node X fail?" one reads one plugin: the verdict carries the plugin's name,
and the plugin's `explain` gives the numbers it judged by (`core.explain`).

Plugins judge many nodes at once. A plugin keeps what it needs per node in its own store,
refreshed from a `NodeView` whenever the node changes (`refresh`), and judges candidate rows
against that store. A node seen with some pods removed (preemption's victims) is judged the
same way, over a one-row store built from the changed view (`scratch`): one implementation of
each rule serves both.
"""

from __future__ import annotations

import abc
import functools
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np
from koordcommon.records import NodeRecord, PodRecord
from koordcommon.resources import ZERO, Resources
from koordcommon.schemas import NodeMetric, NodeResource, NodeTopology

NO_SCORE = -1  # a plugin has no score for a node (e.g. no usage known): the node is rated by the others


# --------------------------------------------------------------------------- what plugins see


@dataclass(slots=True)
class PodInfo:
    """A pod as the plugins judge it: the record plus what is derived from it once."""

    record: PodRecord
    estimate: Resources  # usage expected once it runs (estimator)
    is_prod: bool
    request: Resources  # native cpu / memory requests
    batch: Resources  # koordinator.sh/batch-cpu / batch-memory requests (either prefix)
    mid: Resources  # koordinator.sh/mid-cpu / mid-memory requests (either prefix)
    daemonset: bool
    reservation_affinity: bool = False  # the pod may only run on a matching reservation

    @property
    def key(self) -> str:
        return self.record.key


@dataclass(slots=True)
class AssignedPod:
    """A pod bound (or about to be bound) to a node, as the extender counts it there."""

    key: str  # namespace/name: NodeMetric reports pod usage by it
    estimate: Resources
    assigned_ms: int
    is_prod: bool = False
    requests: Resources = ZERO  # native cpu/memory requests (reservation accounting)
    batch: Resources = ZERO
    mid: Resources = ZERO
    deadline_ms: int | None = None  # estimate at least until then (estimatedSecondsAfterPodScheduled)
    assumed: bool = False  # placed by our prioritize answer, not yet seen bound
    cpuset: frozenset[int] = frozenset()  # CPUs bound to it (its resource-status annotation)
    cpu_qos: str = ""  # LSE | LSR when it holds CPUs
    cpu_exclusive: str = ""  # its CPUExclusivePolicy (PCPULevel | NUMANodeLevel) when it holds CPUs


@dataclass(slots=True)
class NodeView:
    """Everything known about one node, as plugins derive their per-node data from it."""

    name: str
    record: NodeRecord | None
    metric: NodeMetric | None
    node_resource: NodeResource | None
    pods: list[AssignedPod]
    allocatable: Resources  # EstimateNode: allocatable, raw-allocatable annotation overriding it
    reservations: list[Any] = field(default_factory=list)  # reservation.Reservation on this node
    now_ms: int = 0
    # Usage the metric still reports for pods that are gone from `pods` (preemption's victims):
    # node usage minus it is what the node would use without them.
    departed_usage: Resources = ZERO
    topology: NodeTopology | None = None  # the node agent's CPU topology report

    @property
    def known(self) -> bool:
        return self.record is not None or self.metric is not None or self.node_resource is not None


def amounts(r: Resources) -> dict[str, int]:
    """Resources as explanations print them (the collector's REST shape)."""
    return {"cpu_milli": r.cpu_milli, "memory_bytes": r.memory_bytes}


# --------------------------------------------------------------------------- what plugins return


@dataclass(slots=True)
class Verdict:
    """One plugin's filter answer over the rows it was shown: a code per row (0 = pass)."""

    codes: np.ndarray
    reasons: dict[int, str]  # code -> reason, as kube-scheduler shows it
    unresolvable: frozenset[int] = frozenset()  # codes that evicting pods cannot fix

    @staticmethod
    def passing(n: int) -> Verdict:
        return Verdict(np.zeros(n, dtype=np.int16), {})

    @staticmethod
    def from_reasons(reasons: Sequence[str | None], unresolvable: Iterable[str] = ()) -> Verdict:
        """From one reason per row (None = pass), for plugins that judge row by row."""
        codes = np.zeros(len(reasons), dtype=np.int16)
        table: dict[str, int] = {}
        for i, r in enumerate(reasons):
            if r is not None:
                codes[i] = table.setdefault(r, len(table) + 1)
        hard = set(unresolvable)
        return Verdict(codes, {c: r for r, c in table.items()}, frozenset(c for r, c in table.items() if r in hard))


class Plugin(Protocol):
    """A scheduling concern. `store` is the plugin's per-node data, indexed by node row."""

    name: str
    weight: int  # of its score in the weighted sum (0: it does not score)

    def refresh(self, row: int, view: NodeView) -> None:
        """Node `row` changed: derive its data from `view`."""

    def scratch(self, views: list[NodeView]) -> Any:
        """A store holding only `views`, row i for views[i] (judging a node in a changed state)."""

    def filter(self, pod: PodInfo, rows: np.ndarray, now_ms: int, store: Any = None) -> Verdict:
        """Codes for `rows` of `store` (the live one when None)."""

    def score(self, pod: PodInfo, rows: np.ndarray, now_ms: int, store: Any = None) -> np.ndarray | None:
        """0-100 per row, NO_SCORE where the plugin cannot rate a node; None: no opinion at all."""

    def explain(self, pod: PodInfo, view: NodeView, now_ms: int) -> dict[str, Any]:
        """The numbers behind this plugin's verdict and score for one node (`koordctl explain
        pod`): what it compared, with what. The verdict itself comes from `filter`."""


# --------------------------------------------------------------------------- running them


@dataclass(slots=True)
class Rejection:
    plugin: str
    reason: str
    unresolvable: bool = False


@dataclass(slots=True)
class FilterOutcome:
    """What the filter plugins decided for a candidate list, by position in it."""

    passed: np.ndarray  # positions that passed every plugin, in order
    rejected: dict[int, Rejection]  # position -> the first plugin that rejected it

    def failed(self, names: Sequence[str]) -> dict[str, str]:
        return {names[i]: r.reason for i, r in self.rejected.items() if not r.unresolvable}

    def unresolvable(self, names: Sequence[str]) -> dict[str, str]:
        return {names[i]: r.reason for i, r in self.rejected.items() if r.unresolvable}

    def counts(self) -> dict[str, int]:
        """Nodes rejected, by reason (metrics)."""
        out: dict[str, int] = {}
        for r in self.rejected.values():
            out[r.reason] = out.get(r.reason, 0) + 1
        return out


def run_filter(
    plugins: Sequence[Plugin], pod: PodInfo, rows: np.ndarray, now_ms: int, stores: Sequence[Any] | None = None
) -> FilterOutcome:
    """Every plugin in order over the nodes still passing; rows < 0 are names no node has.

    The first plugin (`NodeKnown`) judges every candidate, unknown names included; the others
    see only rows that exist (a name the extender knows nothing of has no data to judge).
    """
    alive = np.arange(len(rows))
    rejected: dict[int, Rejection] = {}
    for k, plugin in enumerate(plugins):
        if k == 1:
            alive = alive[rows.take(alive) >= 0] if len(alive) else alive
        if not len(alive):
            break
        verdict = plugin.filter(pod, rows.take(alive), now_ms, None if stores is None else stores[k])
        bad = verdict.codes.nonzero()[0]
        if not len(bad):
            continue
        at, codes = alive.take(bad).tolist(), verdict.codes.take(bad).tolist()
        for i, code in zip(at, codes):
            rejected[i] = Rejection(plugin.name, verdict.reasons[code], code in verdict.unresolvable)
        alive = alive[verdict.codes == 0]
    return FilterOutcome(alive, rejected)


@dataclass(slots=True)
class ScoreOutcome:
    total: np.ndarray  # the weighted 0-100 per candidate, NO_SCORE where no plugin rated it
    by_plugin: dict[str, np.ndarray]  # each scoring plugin's 0-100 (explanations)


def run_score(
    plugins: Sequence[Plugin], pod: PodInfo, rows: np.ndarray, now_ms: int, stores: Sequence[Any] | None = None
) -> ScoreOutcome:
    """sum(w x score) / sum(w) over the plugins that rated each node (kube-scheduler sums
    weighted scores; dividing by the weights that took part keeps the 0-100 range, so a
    plugin with no score for a node does not pull it down). Rows < 0 get NO_SCORE.
    `stores` (one per plugin) judge scratch stores instead of the live ones, as in run_filter."""
    known = rows >= 0
    some_unknown = not known.all()
    safe = np.where(known, rows, 0) if some_unknown else rows
    total = np.zeros(len(rows), dtype=np.int64)
    weights = np.zeros(len(rows), dtype=np.int64)
    by_plugin: dict[str, np.ndarray] = {}
    for k, plugin in enumerate(plugins):
        if plugin.weight <= 0:
            continue
        s = plugin.score(pod, safe, now_ms, None if stores is None else stores[k])
        if s is None:
            continue
        if some_unknown:
            s = np.where(known, s, NO_SCORE)
        by_plugin[plugin.name] = s
        rated = s >= 0
        total += np.where(rated, s, 0) * plugin.weight
        weights += rated * plugin.weight
    out = np.full(len(rows), NO_SCORE, dtype=np.int64)
    np.floor_divide(total, weights, out=out, where=weights > 0)
    return ScoreOutcome(out, by_plugin)


# --------------------------------------------------------------------------- 0-100 -> 0-10

SCORE_MAPPINGS = ("range", "absolute")


def to_extender_scores(score: np.ndarray, mapping: str = "range", min_span: int = 10) -> np.ndarray:
    """Map 0-100 scores (NO_SCORE where none) to kube-scheduler's extender range 0-10.

    `absolute`: round(score / 10). Simple, but nodes 1-9 points apart tie, so among similar
    nodes the extender stops steering.
    `range` (default): the best candidate gets 10 and the others lose one level per
    `span / 10` points below it, with span = max(best - worst, min_span). Order is kept as far
    as 11 levels allow; when candidates are within `min_span` points, one point is one level,
    so tiny differences are not blown up to the whole range. Nodes without a score get 0.
    """
    valid = score >= 0
    if not valid.any():
        return np.zeros(len(score), dtype=np.int64)
    rated = score[valid]
    table = _ABSOLUTE if mapping == "absolute" else _range_table(int(rated.max()), int(rated.min()), min_span)
    return np.where(valid, table.take(np.clip(score, 0, 100)), 0)


_POINTS = np.arange(101, dtype=np.int64)
_ABSOLUTE = (_POINTS * 10 + 50) // 100


@functools.lru_cache(maxsize=1024)
def _range_table(hi: int, lo: int, min_span: int) -> np.ndarray:
    """10 at `hi`, one level less per span / 10 points below it: round((hi - s) x 10 / span), halves up."""
    span = max(hi - lo, min_span, 1)
    down = ((hi - _POINTS) * 20 + span) // (2 * span)
    table = np.clip(10 - down, 0, 10)
    table.flags.writeable = False  # shared by every request with the same hi, lo and span
    return table


# --------------------------------------------------------------------------- per-node columns


class Columns:
    """Per-node integer columns of one plugin, indexed by node row; grows with the node index."""

    def __init__(self, names: Sequence[str], capacity: int = 256) -> None:
        self.names = tuple(names)
        self.index = {c: k for k, c in enumerate(self.names)}
        self.data = np.zeros((len(self.names), capacity), dtype=np.int64)

    def set(self, row: int, values: Sequence[int]) -> None:
        if row >= self.data.shape[1]:
            grown = np.zeros((len(self.names), max(row + 1, 2 * self.data.shape[1])), dtype=np.int64)
            grown[:, : self.data.shape[1]] = self.data
            self.data = grown
        self.data[:, row] = values

    def take(self, column: str, rows: np.ndarray) -> np.ndarray:
        return self.data[self.index[column]].take(rows)

    def row(self, row: int) -> dict[str, int]:
        """One node's values by column name (explanations, tests)."""
        return dict(zip(self.names, self.data[:, row].tolist()))


class ColumnPlugin(abc.ABC):
    """A plugin whose per-node data is a few integers: it gives `row_values(view)` in
    `COLUMNS` order and judges candidates over whole columns at once."""

    name = ""
    weight = 0
    COLUMNS: tuple[str, ...] = ()

    def __init__(self) -> None:
        self.columns = Columns(self.COLUMNS)

    @abc.abstractmethod
    def row_values(self, view: NodeView) -> list[int]:
        """The node's values in COLUMNS order."""

    @abc.abstractmethod
    def filter(self, pod: PodInfo, rows: np.ndarray, now_ms: int, store: Any = None) -> Verdict:
        """Codes for `rows` of `store` (the live columns when None)."""

    def refresh(self, row: int, view: NodeView) -> None:
        self.columns.set(row, self.row_values(view))

    def scratch(self, views: list[NodeView]) -> Columns:
        store = Columns(self.COLUMNS, capacity=max(len(views), 1))
        for i, v in enumerate(views):
            store.set(i, self.row_values(v))
        return store

    def score(self, pod: PodInfo, rows: np.ndarray, now_ms: int, store: Any = None) -> np.ndarray | None:
        return None
