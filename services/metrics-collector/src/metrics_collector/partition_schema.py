"""PostgreSQL time partitioning of the raw sample tables: one home for the migration that turns
them into partitioned tables and for the collector, which creates partitions ahead of time and
drops them when their rows are past retention.

Native declarative partitioning: `PARTITION BY RANGE (ts)` on the epoch-millisecond timestamp,
one partition per interval named after its start in UTC (`pod_samples_p2026061210` holds
10:00-11:00 on 12 June 2026), and a DEFAULT partition for a row no interval covers (a late
redelivery older than the oldest partition). Retention drops whole partitions, which frees the
space at once without a DELETE scan or VACUUM; what sits in the default partition is deleted.

Frozen like rollup_schema: migrations call what is here, so a change of layout is a new function
beside these (and a migration to it), never an edit. SQLite is not partitioned: its retention job
deletes.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import UTC, datetime

HOUR_MS = 3_600_000

# (table, primary key, indexes other than the key): the layout of the raw sample tables in 0001.
SAMPLE_TABLES_V1: dict[str, tuple[tuple[str, ...], tuple[tuple[str, tuple[str, ...]], ...]]] = {
    "node_samples": (("node", "ts"), (("ix_node_samples_ts", ("ts",)),)),
    "pod_samples": (("node", "ts", "uid"), (("ix_pod_samples_uid_ts", ("uid", "ts")), ("ix_pod_samples_ts", ("ts",)))),
    "container_samples": (("node", "ts", "pod_uid", "container"), (("ix_container_samples_ts", ("ts",)),)),
}
PARTITIONED_TABLES = tuple(SAMPLE_TABLES_V1)

_BOUND = re.compile(r"FROM \('?(-?\d+)'?\) TO \('?(-?\d+)'?\)")


@dataclass(frozen=True)
class Partition:
    name: str
    start: int | None  # epoch ms, inclusive; None for the default partition
    end: int | None  # exclusive


def partition_name(table: str, start_ms: int) -> str:
    return f"{table}_p{datetime.fromtimestamp(start_ms / 1000, UTC):%Y%m%d%H%M}"


def default_name(table: str) -> str:
    return f"{table}_default"


def partitions(conn, table: str) -> list[Partition]:
    """The partitions of `table`, oldest first, the default one last; [] when it is not partitioned."""
    rows = conn.exec_driver_sql(
        "SELECT c.relname, pg_get_expr(c.relpartbound, c.oid) FROM pg_inherits i "
        "JOIN pg_class c ON c.oid = i.inhrelid JOIN pg_class p ON p.oid = i.inhparent "
        "WHERE p.relname = %(t)s AND p.relkind = 'p'",
        {"t": table},
    ).all()
    out, default = [], []
    for name, bound in rows:
        m = _BOUND.search(bound or "")
        if m:
            out.append(Partition(name, int(m.group(1)), int(m.group(2))))
        else:
            default.append(Partition(name, None, None))
    return sorted(out, key=lambda p: p.start) + default


def is_partitioned(conn, table: str) -> bool:
    return bool(
        conn.exec_driver_sql("SELECT 1 FROM pg_class WHERE relname = %(t)s AND relkind = 'p'", {"t": table}).first()
    )


def create_partitions(conn, table: str, until_ms: int, interval_ms: int, since_ms: int | None = None) -> list[str]:
    """Partitions of `interval_ms` covering up to `until_ms`, after the newest one that exists and
    from no earlier than `since_ms` (rounded down to the interval). Returns those created."""
    existing = [p for p in partitions(conn, table) if p.end is not None]
    origin = (until_ms if since_ms is None else since_ms) // interval_ms * interval_ms
    # after a long stop the gap is not filled: its rows, if any come, go to the default partition
    start = max(existing[-1].end, origin) if existing else origin
    created = []
    while start < until_ms:
        end = (start // interval_ms + 1) * interval_ms
        name = partition_name(table, start)
        conn.exec_driver_sql(f"CREATE TABLE IF NOT EXISTS {name} PARTITION OF {table} FOR VALUES FROM ({start}) TO ({end})")
        created.append(name)
        start = end
    return created


def drop_partitions_before(conn, table: str, before_ms: int) -> tuple[list[str], int]:
    """Drop every partition whose rows are all older than `before_ms`; delete such rows from the
    default partition. Returns (partitions dropped, rows deleted from the default one)."""
    dropped, deleted = [], 0
    for p in partitions(conn, table):
        if p.end is not None and p.end <= before_ms:
            conn.exec_driver_sql(f"DROP TABLE {p.name}")
            dropped.append(p.name)
        elif p.end is None:
            deleted += conn.exec_driver_sql(f"DELETE FROM {p.name} WHERE ts < %(b)s", {"b": before_ms}).rowcount
    return dropped, deleted


def partition_by_time_v1(conn, table: str, now_ms: int, interval_ms: int = HOUR_MS, ahead: int = 3,
                         history_ms: int = 48 * HOUR_MS) -> None:  # fmt: skip
    """Turn the raw sample table into a table partitioned by range of ts, keeping its rows:
    partitions from `history_ms` before now (older rows land in the default partition) to
    `ahead` intervals after now."""
    key, indexes = SAMPLE_TABLES_V1[table]
    old = f"{table}_unpartitioned"
    for name, _ in indexes:
        conn.exec_driver_sql(f"DROP INDEX IF EXISTS {name}")
    conn.exec_driver_sql(f"ALTER TABLE {table} RENAME TO {old}")
    conn.exec_driver_sql(f"ALTER INDEX {table}_pkey RENAME TO {old}_pkey")
    conn.exec_driver_sql(f"CREATE TABLE {table} (LIKE {old} INCLUDING DEFAULTS) PARTITION BY RANGE (ts)")
    conn.exec_driver_sql(f"ALTER TABLE {table} ADD CONSTRAINT {table}_pkey PRIMARY KEY ({', '.join(key)})")
    for name, cols in indexes:
        conn.exec_driver_sql(f"CREATE INDEX {name} ON {table} ({', '.join(cols)})")
    conn.exec_driver_sql(f"CREATE TABLE {default_name(table)} PARTITION OF {table} DEFAULT")
    create_partitions(conn, table, now_ms + ahead * interval_ms, interval_ms, since_ms=now_ms - history_ms)
    conn.exec_driver_sql(f"INSERT INTO {table} SELECT * FROM {old}")
    conn.exec_driver_sql(f"DROP TABLE {old}")


def unpartition_v1(conn, table: str) -> None:
    """The reverse of partition_by_time_v1: a plain table with the same rows, key and indexes."""
    key, indexes = SAMPLE_TABLES_V1[table]
    old = f"{table}_partitioned"
    for name, _ in indexes:
        conn.exec_driver_sql(f"DROP INDEX IF EXISTS {name}")
    conn.exec_driver_sql(f"ALTER TABLE {table} RENAME TO {old}")
    conn.exec_driver_sql(f"ALTER TABLE {old} RENAME CONSTRAINT {table}_pkey TO {old}_pkey")
    conn.exec_driver_sql(f"CREATE TABLE {table} (LIKE {old} INCLUDING DEFAULTS)")
    conn.exec_driver_sql(f"ALTER TABLE {table} ADD CONSTRAINT {table}_pkey PRIMARY KEY ({', '.join(key)})")
    for name, cols in indexes:
        conn.exec_driver_sql(f"CREATE INDEX {name} ON {table} ({', '.join(cols)})")
    conn.exec_driver_sql(f"INSERT INTO {table} SELECT * FROM {old}")
    conn.exec_driver_sql(f"DROP TABLE {old}")
