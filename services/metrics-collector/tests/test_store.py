"""Bulk writes, idempotence, rollups and retention on SQLite and PostgreSQL."""

from __future__ import annotations

import ast
import asyncio
from pathlib import Path

import metrics_collector
import numpy as np
import pytest
import sqlalchemy as sa
from alembic import command
from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext
from koordcommon.bus import Delivery
from koordcommon.resources import Resources
from koordcommon.schemas import Event, NodeMetric, NodeResource, Recommendation
from koordcommon.storage import alembic_config
from metrics_collector.bus import Ingest
from metrics_collector.core import retention
from metrics_collector.core.rows import build_rows
from metrics_collector.core.series import HOUR_MS, MINUTE_MS, aggregate
from metrics_collector.partition_schema import PARTITIONED_TABLES, partitions
from metrics_collector.settings import Settings
from metrics_collector.store import MIGRATIONS, VERSION_TABLE, Store, metadata

T0 = 1_800_000_000_000 // HOUR_MS * HOUR_MS  # an hour boundary


@pytest.fixture
def store(database_url):
    s = Store.open(database_url)
    yield s
    s.close()


def test_writes_are_idempotent(store, sample_factory):
    batch = [sample_factory(f"n{n}", T0 + i * 10_000, i) for i in range(20) for n in range(3)]
    first = store.write(build_rows(batch))
    assert first == {"node_samples": 60, "pod_samples": 180, "container_samples": 360}
    # the same messages again (a redelivery), plus a duplicate inside one batch
    again = store.write(build_rows(batch[:30] + batch[:30] + [sample_factory("n9", T0, 0)]))
    assert again == {"node_samples": 1, "pod_samples": 3, "container_samples": 6}
    assert (store.count("node_samples"), store.count("pod_samples"), store.count("container_samples")) == (61, 183, 366)


def test_every_stream_has_its_table(store):
    msgs = [
        NodeMetric(node="n1", ts=T0, node_usage=Resources(1500, 1 << 33), prod_peak=Resources(900, 1 << 32)),
        NodeResource(node="n1", ts=T0, batch=Resources(24_000, 40 << 30), mid=Resources(1000, 1 << 30),
                     reason="computed", written=True, metric_ts=T0 - 1000),
        NodeResource(node="n1", ts=T0 + 60_000, degraded=True, reason="NodeMetric expired"),
        Recommendation(namespace="ns", owner_kind="Deployment", owner_name="web", ts=T0, source="recommender/x"),
        Event(kind="evict", node="n1", action="evict", reason="memory", ts=T0, source="node-agent/n1", seq=1),
        Event(kind="evict", node="n1", action="evict", reason="memory", ts=T0, source="node-agent/n1", seq=2),
    ]
    assert store.write(build_rows(msgs)) == {"node_metrics": 1, "node_resources": 2, "recommendations": 1, "events": 2}
    assert store.write(build_rows(msgs)) == {"node_metrics": 0, "node_resources": 0, "recommendations": 0, "events": 0}
    history = store.node_resources_history("n1", T0, T0 + HOUR_MS, 10)
    assert [(h["batch_cpu_milli"], bool(h["degraded"]), h["reason"]) for h in history] == [
        (24_000, False, "computed"), (None, True, "NodeMetric expired")]  # fmt: skip
    got = store.events(kind="evict", node=None, action=None, start=None, end=None, before=None, limit=10)
    assert [e["msg_id"] for e in got] == ["node-agent/n1:2", "node-agent/n1:1"]


def test_series_on_raw_samples_match_core_buckets(store, sample_factory):
    samples = [sample_factory("n1", T0 + i * 7_000, i) for i in range(100)]  # 700 s, uneven vs 60 s
    store.write(build_rows(samples))
    buckets = store.series("node", {"node": "n1"}, ("cpu_milli", "memory_bytes"), T0, T0 + HOUR_MS, 60_000, "raw")
    want = aggregate(((s.ts, (s.node_usage.cpu_milli, s.node_usage.memory_bytes)) for s in samples), 60_000)
    assert [(b.ts, b.samples, b.sums, b.maxes) for b in buckets] == [(b.ts, b.samples, b.sums, b.maxes) for b in want]
    assert len(buckets) == 12 and buckets[0].samples == 9
    values = store.values("pod", {"uid": "n1-pod-0"}, "cpu_milli", T0, T0 + 70_000)
    assert sorted(values) == [100.0 + 10 * i for i in range(10)]


def test_rollups_answer_like_raw_and_retention_deletes(store, sample_factory):
    samples = [sample_factory(f"n{n}", T0 + i * 10_000, i) for i in range(6 * 60 * 2) for n in range(2)]  # 2 h
    store.write(build_rows(samples))
    policy = retention.RetentionPolicy(lag_ms=0)
    now = T0 + 2 * HOUR_MS
    done = store.apply(retention.plan(now, policy, store.retention_state()))
    assert done["rollup:node:1m"] == 2 * 120 and done["rollup:pod:1m"] == 2 * 3 * 120
    # the hour rollup starts from minutes stored before the run: it comes the run after
    assert "rollup:node:1h" not in done
    done = store.apply(retention.plan(now, policy, store.retention_state()))
    assert (done["rollup:node:1h"], done["rollup:pod:1h"]) == (2 * 2, 2 * 3 * 2)
    again = store.apply(retention.plan(now, policy, store.retention_state()))
    assert not any(v for k, v in again.items() if k.startswith("rollup"))

    metrics = ("cpu_milli", "prod_used_cpu_milli", "batch_requested_memory_bytes")
    for resolution in ("1m", "1h"):
        raw = store.series("node", {"node": "n1"}, metrics, T0, now, HOUR_MS, "raw")
        rolled = store.series("node", {"node": "n1"}, metrics, T0, now, HOUR_MS, resolution)
        assert rolled == raw, resolution
    raw = store.series("pod", {"uid": "n0-pod-2"}, ("cpu_milli",), T0, now, 15 * MINUTE_MS, "raw")
    assert store.series("pod", {"uid": "n0-pod-2"}, ("cpu_milli",), T0, now, 15 * MINUTE_MS, "1m") == raw

    # a day later the raw rows go; the rollups stay
    later = now + 24 * HOUR_MS + MINUTE_MS
    done = store.apply(retention.plan(later, policy, store.retention_state()))
    assert done["delete:node_samples"] == len(samples) and done["delete:container_samples"] == len(samples) * 6
    assert store.count("node_samples") == 0 and store.count("node_usage_1m") == 240
    hourly = store.series("node", {"node": "n1"}, ("cpu_milli",), T0, now, HOUR_MS, "1h")
    cpu = np.array([s.node_usage.cpu_milli for s in samples if s.node == "n1"], dtype=float).reshape(2, 360)
    assert [b.avg(0) for b in hourly] == pytest.approx(cpu.mean(axis=1).tolist())
    assert [b.maxes[0] for b in hourly] == cpu.max(axis=1).tolist()


def test_cluster_summary_reads_the_minute_rollup_and_raw_samples_after_it(store, sample_factory):
    """A recent window answers the same from the 1-minute rollup (up to its newest bucket) plus
    the raw samples after it as from raw samples alone, and reads no raw row the rollup holds."""
    samples = [sample_factory(f"n{n}", T0 + i * 10_000, i) for i in range(60 * 6) for n in range(3)]  # an hour
    store.write(build_rows(samples))
    metrics = ("cpu_milli", "prod_used_cpu_milli")
    raw_only = store.cluster_summary(T0, T0 + HOUR_MS, 5 * MINUTE_MS, "raw", metrics)
    assert store.cluster_summary(T0, T0 + HOUR_MS, 5 * MINUTE_MS, "1m", metrics) == []  # nothing rolled yet
    # roll the first 40 minutes, then take those raw rows away: the answer must not need them
    store.apply(retention.Plan((retention.Rollup("node", "raw", "1m", T0, T0 + 40 * MINUTE_MS, MINUTE_MS),), ()))
    with store.engine.begin() as conn:
        conn.execute(sa.text("DELETE FROM node_samples WHERE ts < :t"), {"t": T0 + 40 * MINUTE_MS})
    mixed = store.cluster_summary(T0, T0 + HOUR_MS, 5 * MINUTE_MS, "raw", metrics)
    assert [p["ts"] for p in mixed] == [p["ts"] for p in raw_only] and len(mixed) == 12
    for a, b in zip(mixed, raw_only, strict=True):
        assert a["nodes"] == b["nodes"] == 3
        assert a == pytest.approx(b)


async def test_refused_messages_are_dropped_not_blocking(store, sample_factory):
    good = sample_factory("n1", T0, 0)
    bad = sample_factory("n2", T0, 0)
    bad.pods[0].uid = "x" * 100  # longer than the uid column: PostgreSQL refuses the row
    deliveries = [Delivery(subject="koord.metrics.n", msg=m, stream_seq=i) for i, m in enumerate([good, bad])]
    ingest = Ingest(store, Settings(), asyncio.Event())
    await ingest.handler("KOORD_METRICS")(deliveries)
    stored = 2 if store.engine.dialect.name == "sqlite" else 1  # SQLite does not enforce lengths
    assert store.count("node_samples") == stored
    assert ingest.database_ok


def test_migrations_build_exactly_the_store_tables(store):
    """The chain on this backend against the tables the store reads and writes: a table,
    column, type, nullability, key or index the code has and the migrations lack (or the
    reverse) is a diff. Catches code that moved ahead of the migrations."""

    with store.engine.connect() as conn:
        # PostgreSQL's partitions are tables of their own, made by the collector, not the chain
        parts = {p.name for t in PARTITIONED_TABLES for p in partitions(conn, t)} if store.postgres else set()

    def ours(obj, name, type_, reflected, compare_to):
        table = name if type_ == "table" else getattr(getattr(obj, "table", None), "name", None)
        return not (type_ == "table" and name == VERSION_TABLE) and table not in parts

    opts = {"compare_type": True, "compare_server_default": True, "include_object": ours}
    with store.engine.connect() as conn:
        diff = compare_metadata(MigrationContext.configure(conn, opts=opts), metadata)
    assert diff == []


def test_migrations_import_only_frozen_definitions():
    """A migration builds what it built when it was written: it may call the frozen layouts
    of rollup_schema, never the store's current tables or lists."""
    versions = Path(metrics_collector.__file__).parent / "migrations" / "versions"
    for path in sorted(versions.glob("*.py")):
        imported = set()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                imported |= {a.name for a in node.names}
            elif isinstance(node, ast.ImportFrom):
                imported.add(node.module)
        frozen = {"metrics_collector.rollup_schema", "metrics_collector.partition_schema"}
        assert imported <= {"alembic", "sqlalchemy", "time", *frozen}, path.name


def test_migrations_downgrade_and_upgrade_again(store):
    cfg = alembic_config(store.engine, MIGRATIONS, VERSION_TABLE)
    command.downgrade(cfg, "base")
    assert not sa.inspect(store.engine).has_table("node_samples")
    command.upgrade(cfg, "head")
    assert store.count("node_samples") == 0


def test_a_sample_twice_in_one_batch_and_across_batches_is_stored_once(store, sample_factory):
    a, b = sample_factory("n0", T0, 1), sample_factory("n0", T0 + 10_000, 2)
    pods, containers = len(a.pods), sum(len(p.containers) for p in a.pods)
    first = store.write(build_rows([a, a, b]))  # redelivered within the same fetch
    assert first["node_samples"] == 2 and first["pod_samples"] == 2 * pods
    assert first["container_samples"] == 2 * containers
    again = store.write(build_rows([b, sample_factory("n0", T0 + 20_000, 3)]))  # b again, one new
    assert again["node_samples"] == 1 and again["pod_samples"] == pods
    assert store.count("pod_samples") == 3 * pods and store.count("container_samples") == 3 * containers


def test_child_rows_without_their_node_row_fall_back_to_conflict_checks(store, sample_factory):
    """Pod rows written on their own (by an older writer) must not fail a later full sample."""
    s = sample_factory("n0", T0, 1)
    rows = build_rows([s])
    rows.node_samples.clear()
    rows.container_samples.clear()
    store.write(rows)  # only the pod rows
    out = store.write(build_rows([s]))
    assert out["node_samples"] == 1
    assert store.count("pod_samples") == len(s.pods)
    assert store.count("container_samples") == sum(len(p.containers) for p in s.pods)
