"""Checkpoint table of the recommender (SQLite and PostgreSQL, one Alembic chain).

One row per workload container holds its compact state (core.aggregate.AggregateState.save):
histograms, per-pod dedupe and memory-window state, profile. Rows are upserted in one
transaction per checkpoint round; a checkpoint of an unchanged container is never written.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping

import sqlalchemy as sa
from koordcommon.storage import is_postgres, make_engine, run_migrations
from sqlalchemy import BigInteger, Column, Integer, LargeBinary, MetaData, String, Table
from sqlalchemy.dialects import postgresql, sqlite

from .core.aggregate import AggregateState
from .core.workload import ContainerKey, WorkloadKey

log = logging.getLogger("recommender.store")

metadata = MetaData()
MIGRATIONS = "recommender:migrations"
VERSION_TABLE = "alembic_version_recommender"

checkpoints = Table(
    "recommender_checkpoints",
    metadata,
    Column("namespace", String(253), primary_key=True),
    Column("owner_kind", String(64), primary_key=True),
    Column("owner_name", String(253), primary_key=True),
    Column("container", String(253), primary_key=True),
    Column("version", Integer, nullable=False),
    Column("state", LargeBinary, nullable=False),
    Column("updated_ms", BigInteger, nullable=False),
)


class CheckpointStore:
    def __init__(self, database_url: str | None, data_dir: str | None = None) -> None:
        self.engine = make_engine(database_url, data_dir, name="recommender")
        run_migrations(self.engine, MIGRATIONS, VERSION_TABLE)

    def close(self) -> None:
        self.engine.dispose()

    def ping(self) -> bool:
        try:
            with self.engine.connect() as conn:
                conn.execute(sa.text("SELECT 1"))
            return True
        except sa.exc.SQLAlchemyError:
            return False

    def save(self, states: Mapping[ContainerKey, bytes], deleted: list[ContainerKey] = ()) -> int:
        """Upsert the given checkpoints and delete the expired ones, in one transaction."""
        if not states and not deleted:
            return 0
        now_ms = int(time.time() * 1000)
        rows = [
            {
                "namespace": k.workload.namespace,
                "owner_kind": k.workload.kind,
                "owner_name": k.workload.name,
                "container": k.container,
                "version": AggregateState.VERSION,
                "state": data,
                "updated_ms": now_ms,
            }
            for k, data in states.items()
        ]
        dialect = postgresql if is_postgres(self.engine) else sqlite
        with self.engine.begin() as conn:
            if rows:
                stmt = dialect.insert(checkpoints)
                stmt = stmt.on_conflict_do_update(
                    index_elements=["namespace", "owner_kind", "owner_name", "container"],
                    set_={"version": stmt.excluded.version, "state": stmt.excluded.state, "updated_ms": stmt.excluded.updated_ms},
                )
                conn.execute(stmt, rows)
            for k in deleted:
                conn.execute(
                    checkpoints.delete().where(
                        (checkpoints.c.namespace == k.workload.namespace)
                        & (checkpoints.c.owner_kind == k.workload.kind)
                        & (checkpoints.c.owner_name == k.workload.name)
                        & (checkpoints.c.container == k.container)
                    )
                )
        return len(rows)

    def load(self) -> dict[ContainerKey, bytes]:
        """Every checkpoint of the supported version (older versions are left, not loaded)."""
        out: dict[ContainerKey, bytes] = {}
        with self.engine.connect() as conn:
            result = conn.execute(sa.select(checkpoints).where(checkpoints.c.version == AggregateState.VERSION))
            for r in result:
                out[ContainerKey(WorkloadKey(r.namespace, r.owner_kind, r.owner_name), r.container)] = bytes(r.state)
        return out
