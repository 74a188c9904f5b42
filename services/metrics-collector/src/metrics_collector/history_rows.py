"""A cluster's history as stored, in the rows of the history format (koordcommon.clusterhistory).

Three tables for a time range and a node selection, read from one resolution: the raw samples,
or the 1-minute or 1-hour rollups (a bucket's average, at the bucket's start). Rows come in
time order, a few thousand at a time, so an export of days of samples streams in bounded memory.

What each row holds:
* `nodes`: a node's capacity and allocatable as its last sample in the range reports them (a
  rollup: that bucket's average); labels are not stored by the collector and are written `{}`;
* `node_usage`: the node's whole usage (`cpu_milli`, `memory_bytes` of its samples);
* `pod_usage`: the pod's usage, with what it declared as its first row in the range says (so a
  pod is the same on all its rows, as the format requires). The rollups keep a pod's names and
  band but not its owner, QoS, priority or limits: those come from the pod's latest raw
  sample while one is kept; otherwise the owner, QoS and limits are empty and the priority
  class is the band's class (which decides online or batch as the full record would).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import sqlalchemy as sa
from koordcommon.clusterhistory import NODE_COLUMNS, NODE_USAGE_COLUMNS, POD_USAGE_COLUMNS
from koordcommon.model import PriorityClass

from .core import rows as R
from .store import SOURCE_TABLES, Store, pod_samples

CHUNK = 5000  # rows fetched (and written) at a time
RESOLUTIONS = ("raw", "1m", "1h")
BAND_CLASS = {R.PROD: PriorityClass.PROD.value, R.MID: PriorityClass.MID.value, R.BATCH: PriorityClass.BATCH.value,
              R.FREE: PriorityClass.FREE.value}  # fmt: skip
_POD_STATIC = ("owner_kind", "owner_name", "priority_class", "priority", "qos",
               "requests_cpu_milli", "requests_memory_bytes", "limits_cpu_milli", "limits_memory_bytes")  # fmt: skip


@dataclass(frozen=True)
class Selection:
    start: int  # epoch ms, inclusive
    end: int  # epoch ms, exclusive
    nodes: tuple[str, ...] = ()  # empty: every node
    resolution: str = "raw"


def _avg(total, samples) -> int:
    """A bucket's average as a whole number (half up)."""
    n = int(samples)
    return (int(total) + n // 2) // n


class HistoryRows:
    def __init__(self, store: Store, sel: Selection):
        self.store, self.sel = store, sel
        self.rollup = sel.resolution != "raw"

    def _table(self, family: str) -> sa.Table:
        return SOURCE_TABLES[(family, self.sel.resolution)]

    def _where(self, table: sa.Table) -> list:
        t = table.c.bucket if self.rollup else table.c.ts
        conds = [t >= self.sel.start, t < self.sel.end]
        if self.sel.nodes:
            conds.append(table.c.node.in_(self.sel.nodes))
        return conds

    def _stream(self, query) -> Iterator[Sequence]:
        with self.store.engine.connect() as conn:
            result = conn.execution_options(stream_results=True, yield_per=CHUNK).execute(query)
            for part in result.partitions(CHUNK):
                yield from part

    # ------------------------------------------------------------------ nodes

    def nodes(self) -> Iterator[tuple]:
        table = self._table("node")
        t = table.c.bucket if self.rollup else table.c.ts
        last = sa.select(table.c.node, sa.func.max(t).label("t")).where(*self._where(table)).group_by(table.c.node)
        last = last.subquery()
        cols = ("capacity_cpu_milli", "capacity_memory_bytes", "allocatable_cpu_milli", "allocatable_memory_bytes")
        if self.rollup:
            values = [table.c.samples, *(table.c[f"{c}_sum"] for c in cols)]
        else:
            values = [table.c[c] for c in cols]
        query = (
            sa.select(table.c.node, *values)
            .join(last, sa.and_(table.c.node == last.c.node, t == last.c.t))
            .order_by(table.c.node)
        )
        for row in self._stream(query):
            if self.rollup:
                yield (row[0], *(_avg(v, row[1]) for v in row[2:]), "{}")
            else:
                yield (*row, "{}")

    # ------------------------------------------------------------------ node usage

    def node_usage(self) -> Iterator[tuple]:
        table = self._table("node")
        if self.rollup:
            c = table.c
            query = sa.select(c.bucket, c.node, c.samples, c.cpu_milli_sum, c.memory_bytes_sum)
            query = query.where(*self._where(table)).order_by(c.bucket, c.node)
            for ts, node, n, cpu, mem in self._stream(query):
                yield ts, node, _avg(cpu, n), _avg(mem, n)
        else:
            query = sa.select(*(table.c[c] for c in NODE_USAGE_COLUMNS)).where(*self._where(table))
            yield from self._stream(query.order_by(table.c.ts, table.c.node))

    # ------------------------------------------------------------------ pod usage

    def pod_usage(self) -> Iterator[tuple]:
        first: dict[str, tuple] = {}  # uid -> what the pod declared, as its first row says
        if not self.rollup:
            c = pod_samples.c
            query = sa.select(*(c[col] for col in POD_USAGE_COLUMNS)).where(*self._where(pod_samples))
            for row in self._stream(query.order_by(c.ts, c.node, c.uid)):
                static = first.get(row[4])
                if static is None:
                    static = first[row[4]] = tuple(row[5:14])  # owner_kind ... limits_memory_bytes
                yield (*row[:5], *static, row[14], row[15])
            return
        table = self._table("pod")
        c = table.c
        declared = self._declared()
        query = sa.select(c.bucket, c.node, c.namespace, c.name, c.uid, c.band, c.samples, c.cpu_milli_sum,
                          c.memory_bytes_sum, c.requests_cpu_milli_sum, c.requests_memory_bytes_sum)  # fmt: skip
        query = query.where(*self._where(table)).order_by(c.bucket, c.node, c.uid)
        for ts, node, ns, name, uid, band, n, cpu, mem, req_cpu, req_mem in self._stream(query):
            static = first.get(uid)
            if static is None:
                known = declared.get(uid)
                if known is not None:
                    static = known
                else:  # no raw sample kept: the band's class, the bucket's average request
                    static = ("", "", BAND_CLASS.get(band, ""), None, "", _avg(req_cpu, n), _avg(req_mem, n), 0, 0)
                first[uid] = static
            yield (ts, node, ns, name, uid, *static, _avg(cpu, n), _avg(mem, n))

    def _declared(self) -> dict[str, tuple]:
        """What each pod of the range declared, from its latest raw sample still kept."""
        table = self._table("pod")
        uids = sa.select(table.c.uid).where(*self._where(table)).distinct().subquery()
        c = pod_samples.c
        last = sa.select(c.uid, sa.func.max(c.ts).label("ts")).where(c.uid.in_(sa.select(uids.c.uid))).group_by(c.uid)
        last = last.subquery()
        query = sa.select(c.uid, *(c[s] for s in _POD_STATIC)).join(last, sa.and_(c.uid == last.c.uid, c.ts == last.c.ts))
        return {row[0]: tuple(row[1:]) for row in self._stream(query)}


ROWS = {"nodes": (NODE_COLUMNS, HistoryRows.nodes), "node_usage": (NODE_USAGE_COLUMNS, HistoryRows.node_usage),
        "pod_usage": (POD_USAGE_COLUMNS, HistoryRows.pod_usage)}  # fmt: skip
