"""PostgreSQL time partitioning of the raw sample tables: the migration keeps the rows, the
collector creates partitions ahead, retention drops whole partitions (and only rolled-up ones)."""

from __future__ import annotations

import time
from itertools import pairwise

import pytest
import sqlalchemy as sa
from alembic import command
from koordcommon.storage import alembic_config
from metrics_collector.core import retention
from metrics_collector.core.rows import build_rows
from metrics_collector.core.series import HOUR_MS, MINUTE_MS
from metrics_collector.partition_schema import PARTITIONED_TABLES, is_partitioned, partition_name, partitions
from metrics_collector.store import MIGRATIONS, VERSION_TABLE, Store

NOW = int(time.time() * 1000) // HOUR_MS * HOUR_MS + 30 * MINUTE_MS  # half past the current hour


def wall_hour() -> int:
    return int(time.time() * 1000) // HOUR_MS * HOUR_MS


@pytest.fixture
def pg_store(database_url):
    if not database_url.startswith("postgresql"):
        pytest.skip("partitioning is PostgreSQL's; SQLite keeps plain tables and its retention job")
    s = Store.open(database_url)
    yield s
    s.close()


def spans(store: Store, table: str) -> list[tuple[int | None, int | None]]:
    with store.engine.connect() as conn:
        return [(p.start, p.end) for p in partitions(conn, table)]


def where(store: Store, table: str) -> dict[str, int]:
    """Rows per partition."""
    with store.engine.connect() as conn:
        q = f"SELECT tableoid::regclass::text, count(*) FROM {table} GROUP BY 1"
        return dict(conn.exec_driver_sql(q).all())


def test_migration_partitions_the_sample_tables_and_keeps_their_rows(pg_store, sample_factory):
    cfg = alembic_config(pg_store.engine, MIGRATIONS, VERSION_TABLE)
    command.downgrade(cfg, "0002")  # plain tables, as before partitioning
    with pg_store.engine.connect() as conn:
        assert not any(is_partitioned(conn, t) for t in PARTITIONED_TABLES)
    recent = [sample_factory("n0", NOW - i * 10 * MINUTE_MS, i) for i in range(6)]  # the last hour
    old = [sample_factory("n1", NOW - 5 * 24 * HOUR_MS, 0)]  # older than the partitions made
    pg_store.write(build_rows(recent + old))
    before = {t: pg_store.count(t) for t in PARTITIONED_TABLES}

    # the migration makes its partitions around the wall clock, which may have moved on to the
    # next hour since this module was imported (or during the upgrade): bracket it
    clock_before = wall_hour()
    command.upgrade(cfg, "head")
    clock_after = wall_hour()
    with pg_store.engine.connect() as conn:
        assert all(is_partitioned(conn, t) for t in PARTITIONED_TABLES)
    assert {t: pg_store.count(t) for t in PARTITIONED_TABLES} == before
    hour = NOW // HOUR_MS * HOUR_MS
    for table in PARTITIONED_TABLES:
        got = spans(pg_store, table)
        assert got[-1] == (None, None)  # the default partition, last
        bounded = got[:-1]
        # contiguous hours from 48 h back to 3 h ahead of the migration's clock
        assert all(a[1] == b[0] and b[1] - b[0] == HOUR_MS for a, b in pairwise(bounded))
        assert bounded[0][0] <= clock_after - 48 * HOUR_MS and bounded[-1][1] >= clock_before + 3 * HOUR_MS
        assert bounded[0][0] <= hour - HOUR_MS  # the samples' hours are partitions of their own
    rows = where(pg_store, "node_samples")
    assert rows["node_samples_default"] == 1  # the five-day-old sample
    assert rows[partition_name("node_samples", hour)] == 4  # NOW - 0/10/20/30 min
    assert rows[partition_name("node_samples", hour - HOUR_MS)] == 2

    command.downgrade(cfg, "0002")  # and back: the same rows in plain tables
    assert {t: pg_store.count(t) for t in PARTITIONED_TABLES} == before
    command.upgrade(cfg, "head")
    assert {t: pg_store.count(t) for t in PARTITIONED_TABLES} == before


def test_partitions_are_created_ahead_once_and_after_a_long_stop_from_now(pg_store):
    ahead = NOW + 10 * HOUR_MS
    created = pg_store.ensure_partitions(ahead, HOUR_MS, 3)
    newest = max(e for _, e in spans(pg_store, "pod_samples") if e is not None)
    assert newest == (ahead // HOUR_MS + 4) * HOUR_MS  # the partition holding ahead + 3 h, whole
    # from the hour holding `ahead` (hours between the migration's last and it are not filled)
    assert created[:4] == [partition_name("node_samples", (ahead // HOUR_MS + h) * HOUR_MS) for h in range(4)]
    assert len(created) == len(PARTITIONED_TABLES) * 4
    assert pg_store.ensure_partitions(ahead, HOUR_MS, 3) == []  # nothing twice
    # a collector back after three days: partitions from now on, the gap left to the default one
    later = ahead + 72 * HOUR_MS
    created = pg_store.ensure_partitions(later, HOUR_MS, 2)
    assert created[0] == partition_name("node_samples", later // HOUR_MS * HOUR_MS)
    assert len(created) == 3 * len(PARTITIONED_TABLES)
    # a row lands in its hour's partition
    with pg_store.engine.begin() as conn:
        conn.exec_driver_sql(
            "INSERT INTO node_samples SELECT 'x', %(ts)s, 10, " + ", ".join(["0"] * 24) + ", 0", {"ts": later + 1}
        )
    assert where(pg_store, "node_samples") == {partition_name("node_samples", later // HOUR_MS * HOUR_MS): 1}


def test_retention_drops_whole_partitions_once_rolled_up(pg_store, sample_factory):
    hour = NOW // HOUR_MS * HOUR_MS
    samples = [sample_factory(f"n{n}", hour - 2 * HOUR_MS + i * 60_000, i) for i in range(150) for n in range(2)]
    samples.append(sample_factory("n9", NOW - 6 * 24 * HOUR_MS, 0))  # late: in the default partition
    pg_store.write(build_rows(samples))
    assert pg_store.count("node_samples") == 301
    policy = retention.RetentionPolicy(raw_ms=HOUR_MS, lag_ms=0, max_span_ms=10 * 24 * HOUR_MS)
    # raw rows go only once rolled up: a first run whose minute rollup stops an hour after the
    # late row rolls and deletes that one (from the default partition) and drops nothing else
    short = retention.RetentionPolicy(raw_ms=HOUR_MS, lag_ms=0, max_span_ms=HOUR_MS)
    done = pg_store.apply(retention.plan(NOW, short, pg_store.retention_state()))
    assert (done["drop:node_samples"], done["delete:node_samples"]) == (0, 1)
    assert pg_store.count("node_samples") == 300
    done = pg_store.apply(retention.plan(NOW, policy, pg_store.retention_state()))
    # rolled through now: every partition wholly older than NOW - 1 h goes, the hour two hours
    # back among them; the one holding NOW - 1 h stays whole (retention is by partition)
    assert done["drop:node_samples"] >= 1 and done["drop:pod_samples"] == done["drop:node_samples"]
    left = where(pg_store, "node_samples")
    assert partition_name("node_samples", hour - 2 * HOUR_MS) not in spans_names(pg_store, "node_samples")
    assert left == {partition_name("node_samples", hour - HOUR_MS): 120, partition_name("node_samples", hour): 60}
    # the minutes of the dropped hour are kept in the rollup
    with pg_store.engine.connect() as conn:
        minutes = conn.execute(sa.text("SELECT count(*) FROM node_usage_1m WHERE bucket < :h"), {"h": hour - HOUR_MS}).scalar()
    assert minutes == 2 * 60 + 1  # and the late row's minute
    # writes go on into the partitions that remain, and again after a second run
    pg_store.write(build_rows([sample_factory("n0", NOW + 1000, 999)]))
    pg_store.apply(retention.plan(NOW, policy, pg_store.retention_state()))
    assert pg_store.count("node_samples") == 181


def spans_names(store: Store, table: str) -> set[str]:
    with store.engine.connect() as conn:
        return {p.name for p in partitions(conn, table)}
