"""Tables of the collector and the bulk writers and queries on them (SQLite and PostgreSQL).

Writes are idempotent: every table has a natural primary key (see core/rows.py) and rows are
inserted with ON CONFLICT DO NOTHING (INSERT OR IGNORE on SQLite), so a message redelivered
after a crash adds nothing. PostgreSQL loads through COPY into a per-connection temporary
table and one INSERT ... SELECT; SQLite through one executemany per table; either way one
transaction per batch, committed before the batch is acknowledged.
"""

from __future__ import annotations

import contextlib
import logging
import threading
from collections.abc import Sequence
from dataclasses import dataclass

import sqlalchemy as sa
from koordcommon.storage import is_postgres, make_engine, run_migrations
from psycopg import errors as psycopg_errors
from sqlalchemy import BigInteger, Boolean, Column, Float, Integer, MetaData, String, Table, Text
from sqlalchemy.dialects import postgresql, sqlite

from .core import rows as R
from .core.retention import Plan, Rollup
from .core.series import MINUTE_MS, Bucket
from .partition_schema import PARTITIONED_TABLES, create_partitions, drop_partitions_before, is_partitioned
from .rollup_schema import node_rollup_v1, pod_rollup_v1

log = logging.getLogger("metrics_collector.store")

metadata = MetaData()
MIGRATIONS = "metrics_collector:migrations"
VERSION_TABLE = "alembic_version_metrics_collector"

_NAME = String(253)  # Kubernetes names: DNS subdomain, at most 253 characters


def _int(name: str, **kw) -> Column:
    return Column(name, BigInteger, nullable=kw.pop("nullable", False), **kw)


node_samples = Table(
    "node_samples",
    metadata,
    Column("node", _NAME, primary_key=True),
    Column("ts", BigInteger, primary_key=True),
    Column("window_s", Float, nullable=False),
    *(_int(c) for c in R.NODE_SAMPLE_COLUMNS[3:-1]),
    Column("pods", Integer, nullable=False),
    sa.Index("ix_node_samples_ts", "ts"),
)

pod_samples = Table(
    "pod_samples",
    metadata,
    Column("node", _NAME, primary_key=True),
    Column("ts", BigInteger, primary_key=True),
    Column("uid", String(64), primary_key=True),
    Column("namespace", _NAME, nullable=False),
    Column("name", _NAME, nullable=False),
    Column("owner_kind", String(64), nullable=False),
    Column("owner_name", _NAME, nullable=False),
    Column("qos", String(16), nullable=False),
    Column("priority_class", String(32), nullable=False),
    Column("band", String(8), nullable=False),
    Column("priority", Integer, nullable=True),
    *(_int(c) for c in R.POD_SAMPLE_COLUMNS[11:]),
    sa.Index("ix_pod_samples_uid_ts", "uid", "ts"),
    sa.Index("ix_pod_samples_ts", "ts"),
)

container_samples = Table(
    "container_samples",
    metadata,
    Column("node", _NAME, primary_key=True),
    Column("ts", BigInteger, primary_key=True),
    Column("pod_uid", String(64), primary_key=True),
    Column("container", _NAME, primary_key=True),
    *(_int(c) for c in R.CONTAINER_SAMPLE_COLUMNS[4:]),
    sa.Index("ix_container_samples_ts", "ts"),
)

node_metrics = Table(
    "node_metrics",
    metadata,
    Column("node", _NAME, primary_key=True),
    Column("ts", BigInteger, primary_key=True),
    Column("aggregate_duration_s", Integer, nullable=False),
    Column("report_interval_s", Integer, nullable=False),
    *(_int(c) for c in R.NODE_METRIC_COLUMNS[4:8]),
    *(_int(c, nullable=True) for c in R.NODE_METRIC_COLUMNS[8:12]),
    Column("pods", Integer, nullable=False),
    Column("aggregated", Text, nullable=False),
)

node_resources = Table(
    "node_resources",
    metadata,
    Column("node", _NAME, primary_key=True),
    Column("ts", BigInteger, primary_key=True),
    *(_int(c, nullable=True) for c in R.NODE_RESOURCE_COLUMNS[2:6]),
    Column("degraded", Boolean, nullable=False),
    Column("reason", Text, nullable=False),
    Column("written", Boolean, nullable=False),
    Column("metric_ts", BigInteger, nullable=True),
    Column("inputs", Text, nullable=False, server_default="{}"),  # the slo-controller's inputs (JSON)
    Column("messages", Text, nullable=False, server_default="[]"),  # its Koordinator-style messages
)

recommendations = Table(
    "recommendations",
    metadata,
    Column("namespace", _NAME, primary_key=True),
    Column("owner_kind", String(64), primary_key=True),
    Column("owner_name", _NAME, primary_key=True),
    Column("ts", BigInteger, primary_key=True),
    Column("source", String(255), nullable=False),
    Column("containers", Text, nullable=False),
)

events = Table(
    "events",
    metadata,
    Column("msg_id", String(320), primary_key=True),
    Column("ts", BigInteger, nullable=False),
    Column("kind", String(32), nullable=False),
    Column("node", _NAME, nullable=False),
    Column("action", String(64), nullable=False),
    Column("reason", Text, nullable=False),
    Column("dry_run", Boolean, nullable=False),
    Column("target", Text, nullable=False),
    Column("details", Text, nullable=False),
    Column("source", String(255), nullable=False),
    sa.Index("ix_events_ts", "ts"),
    sa.Index("ix_events_node_ts", "node", "ts"),
)

# The last what-if report, one row per file (report.json, report.md, the plots): whatif.py.
whatif_files = Table(
    "whatif_files",
    metadata,
    Column("name", String(64), primary_key=True),
    Column("ts", BigInteger, nullable=False),
    Column("content_type", String(64), nullable=False),
    Column("content", sa.LargeBinary, nullable=False),
)

# Every numeric column of a node sample is rolled up as (sum, max) per bucket.
NODE_ROLLUP_METRICS = R.NODE_SAMPLE_COLUMNS[3:]
POD_ROLLUP_METRICS = ("cpu_milli", "memory_bytes", "requests_cpu_milli", "requests_memory_bytes")


node_usage_1m = Table("node_usage_1m", metadata, *node_rollup_v1("node_usage_1m", NODE_ROLLUP_METRICS))
node_usage_1h = Table("node_usage_1h", metadata, *node_rollup_v1("node_usage_1h", NODE_ROLLUP_METRICS))
pod_usage_1m = Table("pod_usage_1m", metadata, *pod_rollup_v1("pod_usage_1m", POD_ROLLUP_METRICS))
pod_usage_1h = Table("pod_usage_1h", metadata, *pod_rollup_v1("pod_usage_1h", POD_ROLLUP_METRICS))

ROW_TABLES: dict[str, tuple[Table, tuple[str, ...]]] = {
    "node_samples": (node_samples, R.NODE_SAMPLE_COLUMNS),
    "pod_samples": (pod_samples, R.POD_SAMPLE_COLUMNS),
    "container_samples": (container_samples, R.CONTAINER_SAMPLE_COLUMNS),
    "node_metrics": (node_metrics, R.NODE_METRIC_COLUMNS),
    "node_resources": (node_resources, R.NODE_RESOURCE_COLUMNS),
    "recommendations": (recommendations, R.RECOMMENDATION_COLUMNS),
    "events": (events, R.EVENT_COLUMNS),
}
for _name, (_table, _cols) in ROW_TABLES.items():
    assert tuple(c.name for c in _table.columns) == _cols, f"{_name}: table and row builder disagree"

ROLLUP_TABLES = {
    ("node", "1m"): node_usage_1m,
    ("node", "1h"): node_usage_1h,
    ("pod", "1m"): pod_usage_1m,
    ("pod", "1h"): pod_usage_1h,
}
SOURCE_TABLES = {("node", "raw"): node_samples, ("pod", "raw"): pod_samples, **{
    (f, r): t for (f, r), t in ROLLUP_TABLES.items()
}}


# Rows that belong to a sample (node, ts) and are written with its node row.
_SAMPLE_CHILDREN = ("pod_samples", "container_samples")
_KEYS = {"pod_samples": ("node", "ts", "uid"), "container_samples": ("node", "ts", "pod_uid", "container")}


def _first_of_new_samples(batch: list[tuple], new: set[tuple], key_len: int) -> list[tuple]:
    """Rows of samples whose node row was just inserted, each key once (a message delivered
    twice in one batch brings its rows twice)."""
    seen: set[tuple] = set()
    out = []
    for row in batch:
        if (row[0], row[1]) in new:
            key = row[:key_len]
            if key not in seen:
                seen.add(key)
                out.append(row)
    return out


class Store:
    def __init__(self, engine: sa.Engine):
        self.engine = engine
        self.postgres = is_postgres(engine)
        self._writer = self._write_postgres if self.postgres else self._write_sqlite
        # SQLite has one writer at a time; a second one would spin in its busy handler (which
        # sleeps up to 100 ms per try), so writers of this process queue here instead.
        self._write_lock = contextlib.nullcontext() if self.postgres else threading.Lock()

    @classmethod
    def open(cls, url: str | None, data_dir=None, migrate: bool = True) -> Store:
        engine = make_engine(url, data_dir, name="metrics-collector")
        if migrate:
            run_migrations(engine, MIGRATIONS, VERSION_TABLE)
        return cls(engine)

    def close(self) -> None:
        self.engine.dispose()

    def ping(self) -> bool:
        try:
            with self.engine.connect() as conn:
                conn.exec_driver_sql("SELECT 1")
            return True
        except sa.exc.SQLAlchemyError:
            return False

    # ------------------------------------------------------------------ writes

    def write(self, rows: R.Rows) -> dict[str, int]:
        """Insert all rows in one transaction; returns the rows actually inserted per table."""
        tables = rows.tables()
        if not tables:
            return {}
        with self._write_lock, self.engine.begin() as conn:
            raw = conn.connection.driver_connection
            if self.postgres and "node_samples" in tables:
                return self._write_postgres_samples(raw, tables)
            return {name: self._writer(raw, name, batch) for name, batch in tables.items()}

    def _write_postgres_samples(self, raw, tables: dict[str, list[tuple]]) -> dict[str, int]:
        """A sample's node, pod and container rows are committed together, so its node row
        decides for all of them: insert the node rows (ON CONFLICT DO NOTHING RETURNING), then
        COPY only the pod and container rows of samples that were new straight into their
        tables. That skips the staging copy and conflict check for the bulk of the rows."""
        new: set[tuple] = set()
        out = {name: self._write_postgres(raw, name, batch, new if name == "node_samples" else None)
               for name, batch in tables.items() if name not in _SAMPLE_CHILDREN}  # fmt: skip
        children = {name: tables[name] for name in _SAMPLE_CHILDREN if name in tables}
        with raw.cursor() as cur:
            cur.execute("SAVEPOINT sample_children")
            try:
                for name, batch in children.items():
                    fresh = _first_of_new_samples(batch, new, len(_KEYS[name]))
                    with cur.copy(f"COPY {name} ({', '.join(ROW_TABLES[name][1])}) FROM STDIN") as copy:
                        for row in fresh:
                            copy.write_row(row)
                    out[name] = len(fresh)
                cur.execute("RELEASE SAVEPOINT sample_children")
            except psycopg_errors.UniqueViolation:
                # Child rows without their node row (written before this rule, or by hand):
                # fall back to the conflict-checked path for this batch.
                cur.execute("ROLLBACK TO SAVEPOINT sample_children")
                for name, batch in children.items():
                    out[name] = self._write_postgres(raw, name, batch)
        return out

    def _write_sqlite(self, raw, name: str, batch: list[tuple]) -> int:
        cols = ROW_TABLES[name][1]
        sql = f"INSERT OR IGNORE INTO {name} ({', '.join(cols)}) VALUES ({', '.join('?' * len(cols))})"
        cur = raw.cursor()
        try:
            cur.executemany(sql, batch)
            return max(cur.rowcount, 0)
        finally:
            cur.close()

    def _write_postgres(self, raw, name: str, batch: list[tuple], inserted_keys: set | None = None) -> int:
        """COPY into a staging table, then INSERT ... ON CONFLICT DO NOTHING; with
        `inserted_keys`, the (node, ts) of the rows actually inserted are added to it."""
        col_list = ", ".join(ROW_TABLES[name][1])
        staging = f"_in_{name}"
        returning = " RETURNING node, ts" if inserted_keys is not None else ""
        with raw.cursor() as cur:
            # One staging table per pooled connection, emptied by every commit.
            cur.execute(
                f"CREATE TEMP TABLE IF NOT EXISTS {staging} (LIKE {name} INCLUDING DEFAULTS) ON COMMIT DELETE ROWS"
            )
            with cur.copy(f"COPY {staging} ({col_list}) FROM STDIN") as copy:
                for row in batch:
                    copy.write_row(row)
            cur.execute(
                f"INSERT INTO {name} ({col_list}) SELECT {col_list} FROM {staging} ON CONFLICT DO NOTHING{returning}"
            )
            if returning:
                inserted_keys.update(cur.fetchall())
            return cur.rowcount

    # ------------------------------------------------------------------ retention

    def retention_state(self) -> dict[tuple[str, str], tuple[int | None, int | None]]:
        """(newest bucket of each rollup, oldest ts/bucket of its source) for core.retention.plan."""
        state = {}
        with self.engine.connect() as conn:
            for (family, target), table in ROLLUP_TABLES.items():
                source = SOURCE_TABLES[(family, "raw" if target == "1m" else "1m")]
                last = conn.execute(sa.select(sa.func.max(table.c.bucket))).scalar()
                first = conn.execute(sa.select(sa.func.min(_time(source)))).scalar()
                state[(family, target)] = (last, first)
        return state

    def apply(self, plan: Plan) -> dict[str, int]:
        done: dict[str, int] = {}
        for rollup in plan.rollups:
            with self._write_lock, self.engine.begin() as conn:
                done[f"rollup:{rollup.family}:{rollup.target}"] = conn.execute(_rollup_insert(rollup, self.postgres)).rowcount
        for delete in plan.deletes:
            table = metadata.tables[delete.table]
            with self._write_lock, self.engine.begin() as conn:
                if self.postgres and delete.table in PARTITIONED_TABLES and is_partitioned(conn, delete.table):
                    # whole partitions past retention are dropped (no DELETE scan, no bloat)
                    dropped, deleted = drop_partitions_before(conn, delete.table, delete.before)
                    done[f"drop:{delete.table}"] = len(dropped)
                    done[f"delete:{delete.table}"] = deleted
                    continue
                done[f"delete:{delete.table}"] = conn.execute(sa.delete(table).where(_time(table) < delete.before)).rowcount
        return done

    def ensure_partitions(self, now_ms: int, interval_ms: int, ahead: int) -> list[str]:
        """PostgreSQL: the partitions of the raw sample tables for the next `ahead` intervals
        exist (created now when missing); the names of those created. SQLite: nothing to do."""
        if not self.postgres:
            return []
        created: list[str] = []
        with self._write_lock, self.engine.begin() as conn:
            for table in PARTITIONED_TABLES:
                if is_partitioned(conn, table):
                    created += create_partitions(conn, table, now_ms + ahead * interval_ms, interval_ms, since_ms=now_ms)
        return created

    # ------------------------------------------------------------------ queries

    def count(self, table: str) -> int:
        with self.engine.connect() as conn:
            return conn.execute(sa.select(sa.func.count()).select_from(metadata.tables[table])).scalar_one()

    def nodes(self, after: str | None, limit: int, since: int | None = None) -> list[dict]:
        """Latest sample of each node reporting since `since` (name order, after the cursor),
        joined with its latest batch/mid allocatable."""
        last = sa.select(node_samples.c.node, sa.func.max(node_samples.c.ts).label("ts")).group_by(node_samples.c.node)
        if since is not None:
            last = last.where(node_samples.c.ts >= since)
        if after is not None:
            last = last.where(node_samples.c.node > after)
        last = last.order_by(node_samples.c.node).limit(limit).subquery()
        latest_res = (
            sa.select(node_resources.c.node, sa.func.max(node_resources.c.ts).label("ts"))
            .group_by(node_resources.c.node)
            .subquery()
        )
        nr = node_resources.alias("nr")
        query = (
            sa.select(node_samples, nr.c.batch_cpu_milli.label("batch_allocatable_cpu_milli"),
                      nr.c.batch_memory_bytes.label("batch_allocatable_memory_bytes"),
                      nr.c.mid_cpu_milli.label("mid_allocatable_cpu_milli"),
                      nr.c.mid_memory_bytes.label("mid_allocatable_memory_bytes"),
                      nr.c.degraded.label("degraded"), nr.c.ts.label("resource_ts"))
            .join(last, sa.and_(node_samples.c.node == last.c.node, node_samples.c.ts == last.c.ts))
            .outerjoin(latest_res, latest_res.c.node == node_samples.c.node)
            .outerjoin(nr, sa.and_(nr.c.node == latest_res.c.node, nr.c.ts == latest_res.c.ts))
            .order_by(node_samples.c.node)
        )  # fmt: skip
        with self.engine.connect() as conn:
            return [dict(r._mapping) for r in conn.execute(query)]

    def node_exists(self, node: str) -> bool:
        with self.engine.connect() as conn:
            found = conn.execute(sa.select(node_samples.c.node).where(node_samples.c.node == node).limit(1)).first()
            if found is None:
                found = conn.execute(
                    sa.select(node_usage_1h.c.node).where(node_usage_1h.c.node == node).limit(1)
                ).first()
        return found is not None

    def series(
        self,
        family: str,
        key: dict[str, str],
        metrics: Sequence[str],
        start: int,
        end: int,
        step: int,
        resolution: str,
    ) -> list[Bucket]:
        """Count, sum and max of each metric per epoch-aligned bucket of `step` ms."""
        src = _Source.of(family, resolution)
        table, t = src.table, src.time
        bucket = _bucket(t, step)
        query = (
            sa.select(bucket, src.samples, *(agg for m in metrics for agg in (src.sum(m), src.max(m))))
            .where(t >= start, t < end, *(table.c[k] == v for k, v in key.items()))
            .group_by(bucket)
            .order_by(bucket)
        )
        out = []
        with self.engine.connect() as conn:
            for row in conn.execute(query):
                vals = [float(v) for v in row[2:]]
                out.append(Bucket(int(row[0]), int(row[1]), tuple(vals[0::2]), tuple(vals[1::2])))
        return out

    def values(self, family: str, key: dict[str, str], metric: str, start: int, end: int) -> list[float]:
        table = SOURCE_TABLES[(family, "raw")]
        query = sa.select(table.c[metric]).where(
            table.c.ts >= start, table.c.ts < end, *(table.c[k] == v for k, v in key.items())
        )
        with self.engine.connect() as conn:
            return [float(v) for v in conn.execute(query).scalars()]

    def pod(self, uid: str) -> dict | None:
        with self.engine.connect() as conn:
            row = conn.execute(
                sa.select(pod_samples).where(pod_samples.c.uid == uid).order_by(pod_samples.c.ts.desc()).limit(1)
            ).first()
            if row is None:
                row = conn.execute(
                    sa.select(pod_usage_1h).where(pod_usage_1h.c.uid == uid)
                    .order_by(pod_usage_1h.c.bucket.desc()).limit(1)
                ).first()  # fmt: skip
        return None if row is None else dict(row._mapping)

    def pods(self, node: str | None, namespace: str | None, after: str | None, limit: int, since: int) -> list[dict]:
        """Latest sample of each pod seen since `since` (uid order, after the cursor)."""
        conds = [pod_samples.c.ts >= since]
        if node:
            conds.append(pod_samples.c.node == node)
        if namespace:
            conds.append(pod_samples.c.namespace == namespace)
        if after is not None:
            conds.append(pod_samples.c.uid > after)
        last = (
            sa.select(pod_samples.c.uid, sa.func.max(pod_samples.c.ts).label("ts"))
            .where(*conds).group_by(pod_samples.c.uid).order_by(pod_samples.c.uid).limit(limit).subquery()
        )  # fmt: skip
        query = (
            sa.select(pod_samples)
            .join(last, sa.and_(pod_samples.c.uid == last.c.uid, pod_samples.c.ts == last.c.ts))
            .order_by(pod_samples.c.uid)
        )
        with self.engine.connect() as conn:
            return [dict(r._mapping) for r in conn.execute(query)]

    def cluster_summary(self, start: int, end: int, step: int, resolution: str, metrics: Sequence[str]) -> list[dict]:
        """Per bucket: the sum over nodes of each node's average of every metric, and the node count.

        Raw resolution with whole-minute steps reads the 1-minute rollup up to its newest bucket
        and raw samples only after it (the last few minutes, not yet rolled up): at thousands of
        nodes an hour of raw samples is millions of rows, its rollup sixty per node."""
        with self.engine.connect() as conn:
            rolled_until = None
            if resolution == "raw" and step % MINUTE_MS == 0:
                newest = conn.execute(sa.select(sa.func.max(node_usage_1m.c.bucket))).scalar()
                rolled_until = None if newest is None else min(max(newest + MINUTE_MS, start), end)
            parts = []
            spans = [("raw", start, end)] if rolled_until is None else [("1m", start, rolled_until), ("raw", rolled_until, end)]
            for res, lo, hi in spans if resolution == "raw" else [(resolution, start, end)]:
                if hi <= lo:
                    continue
                src = _Source.of("node", res)
                table, t = src.table, src.time
                bucket = _bucket(t, step)
                parts.append(
                    sa.select(bucket, table.c.node, src.samples.label("n"), *(src.sum(m).label(m) for m in metrics))
                    .where(t >= lo, t < hi)
                    .group_by(bucket, table.c.node)
                )
            if not parts:
                return []
            union = (parts[0] if len(parts) == 1 else sa.union_all(*parts)).subquery()
            per_node = (
                sa.select(union.c.b, union.c.node, sa.func.sum(union.c.n).label("n"),
                          *(sa.func.sum(union.c[m]).label(m) for m in metrics))
                .group_by(union.c.b, union.c.node)
                .subquery()
            )  # fmt: skip
            query = (
                sa.select(
                    per_node.c.b,
                    sa.func.count().label("nodes"),
                    *(sa.func.sum(per_node.c[m] * 1.0 / per_node.c.n).label(m) for m in metrics),
                )
                .group_by(per_node.c.b)
                .order_by(per_node.c.b)
            )
            return [
                {"ts": int(r.b), "nodes": int(r.nodes), **{m: float(r._mapping[m]) for m in metrics}}
                for r in conn.execute(query)
            ]

    def events(
        self,
        *,
        kind: str | None,
        node: str | None,
        action: str | None,
        start: int | None,
        end: int | None,
        before: tuple[int, str] | None,
        limit: int,
    ) -> list[dict]:
        """Newest first; `before` is the (ts, msg_id) of the last event of the previous page."""
        conds = []
        for col, val in (("kind", kind), ("node", node), ("action", action)):
            if val is not None:
                conds.append(events.c[col] == val)
        if start is not None:
            conds.append(events.c.ts >= start)
        if end is not None:
            conds.append(events.c.ts < end)
        if before is not None:
            ts, msg_id = before
            conds.append(sa.or_(events.c.ts < ts, sa.and_(events.c.ts == ts, events.c.msg_id < msg_id)))
        query = (
            sa.select(events).where(*conds).order_by(events.c.ts.desc(), events.c.msg_id.desc()).limit(limit)
        )
        with self.engine.connect() as conn:
            return [dict(r._mapping) for r in conn.execute(query)]

    def node_resources_history(self, node: str, start: int, end: int, limit: int) -> list[dict]:
        query = (
            sa.select(node_resources)
            .where(node_resources.c.node == node, node_resources.c.ts >= start, node_resources.c.ts < end)
            .order_by(node_resources.c.ts)
            .limit(limit)
        )
        with self.engine.connect() as conn:
            return [dict(r._mapping) for r in conn.execute(query)]


def _time(table: Table) -> Column:
    """The time a row is about: `ts` of a raw sample, `bucket` of a rollup."""
    return table.c.ts if "ts" in table.c else table.c.bucket


@dataclass(frozen=True)
class _Source:
    """How one family's rows at one resolution are aggregated: raw samples count and sum
    themselves, a rollup carries its sample count and each metric's sum and max."""

    table: Table
    time: Column
    samples: sa.ColumnElement
    rollup: bool

    @classmethod
    def of(cls, family: str, resolution: str) -> _Source:
        table = SOURCE_TABLES[(family, resolution)]
        rollup = resolution != "raw"
        samples = sa.func.sum(table.c.samples) if rollup else sa.func.count()
        return cls(table, _time(table), samples, rollup)

    def sum(self, metric: str) -> sa.ColumnElement:
        return sa.func.sum(self.table.c[f"{metric}_sum" if self.rollup else metric])

    def max(self, metric: str) -> sa.ColumnElement:
        return sa.func.max(self.table.c[f"{metric}_max" if self.rollup else metric])


def _bucket(t, step: int):
    # The step is inlined (a validated int): as a bound parameter PostgreSQL would see the
    # SELECT and GROUP BY expressions as different and reject the query.
    lit = sa.literal_column(str(int(step)), BigInteger)
    return ((t // lit) * lit).label("b")


def _rollup_insert(r: Rollup, postgres: bool) -> sa.Insert:
    """INSERT ... SELECT of complete buckets, ON CONFLICT DO NOTHING (re-running adds nothing)."""
    target = ROLLUP_TABLES[(r.family, r.target)]
    src = _Source.of(r.family, r.source)
    t = src.table.c
    metrics = NODE_ROLLUP_METRICS if r.family == "node" else POD_ROLLUP_METRICS
    keys = {"node": t.node}
    if r.family == "pod":  # a pod's names and band are the same in all its rows; MAX picks that one
        keys.update(uid=t.uid, namespace=sa.func.max(t.namespace), name=sa.func.max(t.name), band=sa.func.max(t.band))
    group = [t.node] if r.family == "node" else [t.node, t.uid]
    bucket = _bucket(src.time, r.step)
    rows = (
        sa.select(*keys.values(), bucket, src.samples, *(agg for m in metrics for agg in (src.sum(m), src.max(m))))
        .where(src.time >= r.start, src.time < r.end)
        .group_by(*group, bucket)
    )
    columns = [*keys, "bucket", "samples", *(f"{m}_{agg}" for m in metrics for agg in ("sum", "max"))]
    insert = postgresql.insert if postgres else sqlite.insert
    # the rows inserted are reported (SQLAlchemy keeps an INSERT's rowcount only when asked)
    return insert(target).from_select(columns, rows).on_conflict_do_nothing().execution_options(preserve_rowcount=True)
