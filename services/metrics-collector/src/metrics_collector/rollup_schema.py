"""Layout of the rollup tables (node_usage_1m/1h, pod_usage_1m/1h): one home for the store's
tables and the migrations that create them.

Frozen. A migration must create what it created when it was written, whatever the code says
later, and migrations call these functions. What may change, the metrics rolled up, is an
argument: the store passes today's list, a migration the list it shipped with. A change to
the layout itself is a new function beside these (and a migration to it), never an edit here.
tests/test_store.py builds the schema with the migration chain on SQLite and PostgreSQL and
compares it with the store's tables, so tables that move ahead of the migrations fail there.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa


def node_rollup_v1(name: str, metrics: Sequence[str]) -> list[sa.schema.SchemaItem]:
    """Columns and indexes of a per-node rollup: (node, bucket) -> samples, sum and max of each metric."""
    return [
        sa.Column("node", sa.String(253), primary_key=True),
        sa.Column("bucket", sa.BigInteger(), primary_key=True),
        sa.Column("samples", sa.Integer(), nullable=False),
        *_sum_max(metrics),
        sa.Index(f"ix_{name}_bucket", "bucket"),
    ]


def pod_rollup_v1(name: str, metrics: Sequence[str]) -> list[sa.schema.SchemaItem]:
    """Columns and indexes of a per-pod rollup: (node, uid, bucket) -> the pod's names and band,
    samples, sum and max of each metric."""
    return [
        sa.Column("node", sa.String(253), primary_key=True),
        sa.Column("uid", sa.String(64), primary_key=True),
        sa.Column("bucket", sa.BigInteger(), primary_key=True),
        sa.Column("namespace", sa.String(253), nullable=False),
        sa.Column("name", sa.String(253), nullable=False),
        sa.Column("band", sa.String(8), nullable=False),
        sa.Column("samples", sa.Integer(), nullable=False),
        *_sum_max(metrics),
        sa.Index(f"ix_{name}_uid_bucket", "uid", "bucket"),
        sa.Index(f"ix_{name}_bucket", "bucket"),
    ]


def _sum_max(metrics: Sequence[str]) -> list[sa.Column]:
    return [sa.Column(f"{m}_{agg}", sa.BigInteger(), nullable=False) for m in metrics for agg in ("sum", "max")]
